"""A broker without a controller leads every partition it hosts (single node).

Until the controller (issue 9's controller part) runs in every broker, a single node is its
own controller: at start-up, and whenever a topic is created or grown here, it builds the
LeaderAndIsr and UpdateMetadata requests a controller would have sent it — itself the leader
in leader epoch 0, ISR and replicas [itself], controller epoch 0, itself the only live broker
and the controller — and applies them through the same code as the handlers
(:func:`strom.broker.handlers.leader_and_isr.apply`, :func:`..update_metadata.apply`). So the
single node runs the partition layer like any cluster member, its HW is its log end after
each append, and what users see does not change.

Off with ``strom.controller.enable=false`` or a ``zookeeper.connect`` (a cluster member) (the
first is internal, for tests that act as the controller:
the broker then waits for a controller's requests; this is also what a cluster member does).
While it is on, requests of remote controllers are refused (STALE_CONTROLLER_EPOCH): nobody
else may move a single node's partitions.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from strom.protocol.interbroker import leader_and_isr_v7_request as lai
from strom.protocol.interbroker import update_metadata_v8_request as um
from strom.protocol.messages import build

if TYPE_CHECKING:
    from strom.broker.broker import Broker
    from strom.metadata.topics import TopicInfo

log = logging.getLogger(__name__)
EXTENSION = "local_leadership"
ENABLE_KEY = "strom.controller.enable"
LOCAL_CONTROLLER_EPOCH = 0
LOCAL_LEADER_EPOCH = 0


def local_controller_active(broker: Any) -> bool:
    return broker.extensions.get(EXTENSION) is not None


async def register_topic(broker: Any, name: str, topic_id: uuid.UUID | None,
                   replicas: Mapping[int, list[int]]) -> None:  # fmt: skip
    """A topic a controller's LeaderAndIsr names but the local topic registry does not know
    (a broker of a test acting as the controller, on its own embedded store): registered with
    the controller's id, so Produce, Fetch and Metadata find it. Known topics are left as they
    are (the controller's store is their truth)."""
    info = broker.topics.get(name)
    try:
        if info is None:
            await broker.topics.create(name, replicas, {}, topic_id=topic_id)
        else:
            missing = {p: r for p, r in replicas.items() if p not in info.replicas}
            if missing:
                await broker.topics.add_partitions(name, missing)
    except Exception as exc:  # a store shared with others may have it already
        log.info("topic %s not registered locally: %s", name, exc)


class LocalLeadership:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def start(self) -> None:
        """Lead every hosted partition (called once the logs are loaded)."""
        hosted: dict[str, list[int]] = {}
        for (topic, index), _log in self.broker.logs.logs():
            hosted.setdefault(topic, []).append(index)
        infos = [(info, sorted(hosted[info.name])) for info in self.broker.topics
                 if info.name in hosted]  # fmt: skip
        self.lead(infos)
        log.info("leading %d partitions of %d topics locally (no controller)",
                 sum(len(p) for _i, p in infos), len(infos))  # fmt: skip

    def lead(self, topics: Iterable[tuple[TopicInfo, list[int]]]) -> None:
        """Apply the LeaderAndIsr + UpdateMetadata making this broker the leader of
        ``partitions`` of each topic."""
        from strom.broker.handlers import leader_and_isr, update_metadata

        node = self.broker.node_id
        me = (node,)
        lai_topics, um_topics = [], []
        for info, partitions in topics:
            if not partitions:
                continue
            lai_topics.append(build(lai.LeaderAndIsrTopicState,
                topic_name=info.name, topic_id=info.topic_id, partition_states=tuple(
                    build(lai.LeaderAndIsrPartitionState,
                        partition_index=p, controller_epoch=LOCAL_CONTROLLER_EPOCH, leader=node,
                        leader_epoch=LOCAL_LEADER_EPOCH, isr=me, partition_epoch=0, replicas=me,
                    ) for p in partitions)))  # fmt: skip
            um_topics.append(build(um.UpdateMetadataTopicState,
                topic_name=info.name, topic_id=info.topic_id, partition_states=tuple(
                    build(um.UpdateMetadataPartitionState,
                        partition_index=p, controller_epoch=LOCAL_CONTROLLER_EPOCH, leader=node,
                        leader_epoch=LOCAL_LEADER_EPOCH, isr=me, zk_version=0, replicas=me,
                    ) for p in partitions)))  # fmt: skip
        host, port = self.broker.advertised
        leader_and_isr.apply(self.broker, build(lai.LeaderAndIsrRequest,
            controller_id=node, controller_epoch=LOCAL_CONTROLLER_EPOCH, type_=0,
            topic_states=tuple(lai_topics), live_leaders=(
                build(lai.LeaderAndIsrLiveLeader, broker_id=node, host_name=host, port=port),),
        ))  # fmt: skip
        update_metadata.apply(self.broker, build(um.UpdateMetadataRequest,
            controller_id=node, controller_epoch=LOCAL_CONTROLLER_EPOCH,
            topic_states=tuple(um_topics), live_brokers=(build(um.UpdateMetadataBroker,
                id_=node, endpoints=(build(um.UpdateMetadataEndpoint,
                    port=port, host=host, listener="PLAINTEXT", security_protocol=0),),
                rack=self.broker.config.get("broker.rack")),),
        ))  # fmt: skip

    def topic_changed(self, info: TopicInfo, partitions: Iterable[int]) -> None:
        """``partitions`` of ``info`` were created here: lead them."""
        self.lead([(info, sorted(partitions))])


def start(broker: Broker) -> None:
    """Install local leadership and lead what is hosted."""
    leadership = LocalLeadership(broker)
    broker.extensions[EXTENSION] = leadership
    leadership.start()


def start_without(broker: Broker) -> None:
    """``strom.controller.enable=false``: wait for a controller; until its UpdateMetadata,
    Metadata names this broker alone."""
    from strom.broker.metadata_cache import BrokerInfo

    host, port = broker.advertised
    broker.replicas.cache.brokers = {broker.node_id: BrokerInfo(broker.node_id, host, port)}
