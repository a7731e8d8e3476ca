"""One event's requests to the brokers, batched per broker (Kafka's ``ControllerBrokerRequestBatch``).

While the controller handles an event it records what each broker must hear: the state of the
partitions it replicates (LeaderAndIsr), partitions it must stop (StopReplica, with or without
deleting the log) and partitions whose metadata every broker's cache must learn
(UpdateMetadata). :meth:`RequestBatch.send` then queues at most one request of each kind per
broker, in Kafka's order: LeaderAndIsr, then UpdateMetadata, then StopReplica, so that a new
leader knows its followers before an old replica stops.

Every request carries the controller's id and epoch and the destination broker's epoch (the
``created`` of its registration); brokers refuse a lower controller epoch
(STALE_CONTROLLER_EPOCH) or an epoch not of their current registration (STALE_BROKER_EPOCH).
UpdateMetadata always lists every live broker with its endpoints and rack.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

from strom.controller.channel import ChannelManager
from strom.controller.context import TP, ControllerContext
from strom.metadata.zk_model import LEADER_DURING_DELETE
from strom.protocol.interbroker import (
    LEADER_AND_ISR,
    STOP_REPLICA,
    UPDATE_METADATA,
    VERSIONS,
)
from strom.protocol.interbroker import leader_and_isr_v7_request as lai
from strom.protocol.interbroker import stop_replica_v4_request as sr
from strom.protocol.interbroker import update_metadata_v8_request as um
from strom.protocol.messages import build

_SECURITY_PROTOCOLS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
StopCallback = Callable[[int, Any], None]


class RequestBatch:
    def __init__(self, ctx: ControllerContext, controller_id: int) -> None:
        self.ctx = ctx
        self.controller_id = controller_id
        self.leader_and_isr: dict[int, dict[TP, bool]] = {}  # broker -> tp -> is_new
        self.update_metadata: dict[int, set[TP]] = {}
        self.stop_replica: dict[int, dict[TP, bool]] = {}  # broker -> tp -> delete
        self.stop_callback: StopCallback | None = None
        #: told of each broker's LeaderAndIsr answer (broker id, response)
        self.leader_and_isr_callback: StopCallback | None = None
        self.deleted: set[TP] = set()  # partitions UpdateMetadata announces as deleted

    def empty(self) -> bool:
        return not (self.leader_and_isr or self.update_metadata or self.stop_replica)

    def add_leader_and_isr(self, brokers: Iterable[int], tp: TP, *, is_new: bool = False) -> None:
        for broker in brokers:
            if self.ctx.live(broker):
                per = self.leader_and_isr.setdefault(broker, {})
                per[tp] = per.get(tp, False) or is_new
        self.add_update_metadata(self.ctx.live_ids(), [tp])

    def add_update_metadata(self, brokers: Iterable[int], tps: Iterable[TP] = ()) -> None:
        tps = list(tps)
        for broker in brokers:
            if self.ctx.live(broker):
                self.update_metadata.setdefault(broker, set()).update(tps)

    def add_stop_replica(self, brokers: Iterable[int], tp: TP, *, delete: bool) -> None:
        for broker in brokers:
            if self.ctx.live(broker):
                per = self.stop_replica.setdefault(broker, {})
                per[tp] = per.get(tp, False) or delete

    # building ------------------------------------------------------------------------------
    def _lai_request(self, broker: int, tps: dict[TP, bool]) -> Any:
        topics: dict[str, list[Any]] = {}
        leaders: set[int] = set()
        for (topic, partition), is_new in sorted(tps.items()):
            found = self.ctx.states.get((topic, partition))
            doc = self.ctx.topics.get(topic)
            if found is None or doc is None:
                continue
            s = found.state
            leaders.add(s.leader)
            topics.setdefault(topic, []).append(build(lai.LeaderAndIsrPartitionState,
                partition_index=partition, controller_epoch=s.controller_epoch,
                leader=s.leader, leader_epoch=s.leader_epoch, isr=tuple(s.isr),
                partition_epoch=found.version, replicas=tuple(doc.assignment.get(partition, ())),
                adding_replicas=tuple(doc.adding.get(partition, ())),
                removing_replicas=tuple(doc.removing.get(partition, ())),
                is_new=is_new, leader_recovery_state=s.leader_recovery_state,
            ))  # fmt: skip
        live_leaders = tuple(
            build(lai.LeaderAndIsrLiveLeader, broker_id=b, host_name=self.ctx.brokers[b].registration.host,
                                       port=self.ctx.brokers[b].registration.port)
            for b in sorted(leaders) if b in self.ctx.brokers
        )  # fmt: skip
        return build(lai.LeaderAndIsrRequest,
            controller_id=self.controller_id, controller_epoch=self.ctx.epoch,
            broker_epoch=self.ctx.brokers[broker].epoch, type_=0,
            topic_states=tuple(
                build(lai.LeaderAndIsrTopicState, topic_name=t, topic_id=self.ctx.topics[t].topic_id,
                                           partition_states=tuple(ps))
                for t, ps in topics.items()
            ),
            live_leaders=live_leaders,
        )  # fmt: skip

    def live_brokers(self) -> tuple[Any, ...]:
        return tuple(
            build(um.UpdateMetadataBroker,
                id_=b, rack=lb.registration.rack,
                endpoints=tuple(build(um.UpdateMetadataEndpoint,
                    port=e.port, host=e.host, listener=e.listener,
                    security_protocol=_SECURITY_PROTOCOLS.get(e.security_protocol, 0))
                    for e in lb.registration.endpoints),
            )
            for b, lb in sorted(self.ctx.brokers.items())
        )  # fmt: skip

    def _um_request(self, broker: int, tps: set[TP]) -> Any:
        topics: dict[str, list[Any]] = {}
        for topic, partition in sorted(tps):
            doc = self.ctx.topics.get(topic)
            found = self.ctx.states.get((topic, partition))
            if doc is None or found is None:
                continue
            s = found.state
            replicas = doc.assignment.get(partition, [])
            deleted = (topic, partition) in self.deleted
            topics.setdefault(topic, []).append(build(um.UpdateMetadataPartitionState,
                partition_index=partition, controller_epoch=s.controller_epoch,
                leader=LEADER_DURING_DELETE if deleted else s.leader,
                leader_epoch=s.leader_epoch, isr=tuple(s.isr), zk_version=found.version,
                replicas=tuple(replicas),
                offline_replicas=tuple(b for b in replicas
                                       if not self.ctx.replica_online(b, (topic, partition))),
            ))  # fmt: skip
        return build(um.UpdateMetadataRequest,
            controller_id=self.controller_id, controller_epoch=self.ctx.epoch,
            broker_epoch=self.ctx.brokers[broker].epoch,
            topic_states=tuple(
                build(um.UpdateMetadataTopicState, topic_name=t, topic_id=self.ctx.topics[t].topic_id,
                                            partition_states=tuple(ps))
                for t, ps in topics.items()
            ),
            live_brokers=self.live_brokers(),
        )  # fmt: skip

    def _sr_request(self, broker: int, tps: dict[TP, bool]) -> Any:
        topics: dict[str, list[Any]] = {}
        for (topic, partition), delete in sorted(tps.items()):
            found = self.ctx.states.get((topic, partition))
            epoch = found.state.leader_epoch if found else -1
            # Kafka's sentinel -2 ("deleted") lets the broker delete whatever its epoch is
            topics.setdefault(topic, []).append(build(sr.StopReplicaPartitionState,
                partition_index=partition, leader_epoch=-2 if delete else epoch,
                delete_partition=delete))  # fmt: skip
        return build(sr.StopReplicaRequest,
            controller_id=self.controller_id, controller_epoch=self.ctx.epoch,
            broker_epoch=self.ctx.brokers[broker].epoch,
            topic_states=tuple(build(sr.StopReplicaTopicState, topic_name=t, partition_states=tuple(ps))
                               for t, ps in topics.items()),
        )  # fmt: skip

    def send(self, channel: ChannelManager) -> None:
        """Queue the batch's requests and empty it."""
        answered = self.leader_and_isr_callback
        for broker, tps in self.leader_and_isr.items():
            if broker in self.ctx.brokers:
                channel.send(broker, LEADER_AND_ISR, VERSIONS[LEADER_AND_ISR],
                             self._lai_request(broker, tps),
                             functools.partial(answered, broker) if answered else None)  # fmt: skip
        for broker, um_tps in self.update_metadata.items():
            if broker in self.ctx.brokers:
                channel.send(broker, UPDATE_METADATA, VERSIONS[UPDATE_METADATA],
                             self._um_request(broker, um_tps))  # fmt: skip
        callback = self.stop_callback
        for broker, stops in self.stop_replica.items():
            if broker in self.ctx.brokers:
                channel.send(broker, STOP_REPLICA, VERSIONS[STOP_REPLICA],
                             self._sr_request(broker, stops),
                             functools.partial(callback, broker) if callback else None)
        self.leader_and_isr, self.stop_replica = {}, {}
        self.update_metadata = {}
        self.deleted = set()
