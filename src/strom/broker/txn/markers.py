"""Transaction markers: written by partition leaders, sent there by the transaction coordinator.

:func:`write_local` is the leader's side of WriteTxnMarkers (key 27): for each partition this
broker leads it appends the marker's control batch and waits until it is replicated (acks=all:
the high watermark passes it, as Kafka's ``handleWriteTxnMarkersRequest``), then, for
``__consumer_offsets``, publishes or drops the producer's pending transactional offsets in the
group coordinator. A marker carrying a coordinator epoch older than the last marker of that
producer in the partition is TRANSACTION_COORDINATOR_FENCED (a deposed coordinator's late
marker); the producer-epoch check (INVALID_PRODUCER_EPOCH) is the log's.

:class:`MarkerChannel` is the coordinator's side (Kafka's ``TransactionMarkerChannelManager``):
partitions grouped by their leader in the metadata cache, one WriteTxnMarkers v1 request per
leader (the local leader through :func:`write_local`, no socket), retried after
``BACKOFF_S`` — with a fresh look at the metadata cache — until every partition has answered
NONE, while the coordinator still owns the transaction (``still_owner``). A partition of a
deleted topic counts as done; INVALID_PRODUCER_EPOCH and TRANSACTION_COORDINATOR_FENCED stop
the send (a newer epoch or coordinator has ended the transaction there).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kio.schema.write_txn_markers.v1 import request as wtm

from strom.broker.txn.coordinator import TxnMarker
from strom.protocol.control import build_marker
from strom.protocol.errors import ErrorCode, KafkaError, error_code_of
from strom.protocol.messages import build
from strom.replication.connection import BrokerConnection, BrokerConnectionError
from strom.replication.peers import PeerConnections
from strom.storage.batch_validation import AppendOrigin

if TYPE_CHECKING:
    from strom.broker.group.service import GroupService
    from strom.clock import Clock
    from strom.metadata.topics import TopicRegistry
    from strom.replication.replica_manager import ReplicaManager

log = logging.getLogger(__name__)
E = ErrorCode
TopicPartition = tuple[str, int]
API_KEY = 27
VERSION = 1
OFFSETS_TOPIC = "__consumer_offsets"
APPEND_TIMEOUT_S = 15.0  # a leader's wait for the marker's replication
SEND_TIMEOUT_S = 30.0  # the coordinator's wait for a leader's answer (longer than the above)
BACKOFF_S = 0.1
_STOP = (E.invalid_producer_epoch, E.transaction_coordinator_fenced, E.producer_fenced)


async def write_local(replicas: ReplicaManager, groups: GroupService, clock: Clock,
                      marker: TxnMarker, partitions: tuple[TopicPartition, ...],
                      timeout_s: float = APPEND_TIMEOUT_S) -> dict[TopicPartition, ErrorCode]:  # fmt: skip
    """Append ``marker`` to each of ``partitions`` as their leader (concurrently), each
    answered once replicated; see the module doc."""
    batch = build_marker(marker.producer_id, marker.producer_epoch, commit=marker.commit,
                         coordinator_epoch=marker.coordinator_epoch,
                         timestamp_ms=clock.time_ms())  # fmt: skip

    async def one(topic: str, index: int) -> ErrorCode:
        try:
            part = replicas.leader_partition(topic, index)
            entry = part.log.producer_state.producers.get(marker.producer_id)
            if entry is not None and entry.coordinator_epoch > marker.coordinator_epoch:
                raise KafkaError(E.transaction_coordinator_fenced,
                                 f"coordinator epoch {marker.coordinator_epoch} is older than "
                                 f"{entry.coordinator_epoch}")  # fmt: skip
            await replicas.append_replicated(topic, index, batch, AppendOrigin.COORDINATOR,
                                             timeout_s)  # fmt: skip
        except Exception as exc:
            code = error_code_of(exc)
            log.warning("marker for producer %d to %s-%d failed: %s",
                        marker.producer_id, topic, index, exc)  # fmt: skip
            return code
        if topic == OFFSETS_TOPIC and groups.coordinator is not None:
            groups.coordinator.complete_txn(marker.producer_id, marker.commit)
        return E.none

    codes = await asyncio.gather(*(one(t, p) for t, p in partitions))
    return dict(zip(partitions, codes, strict=True))


class MarkerChannel:
    """Sends markers to partition leaders until written; one connection per leader."""

    def __init__(self, replicas: ReplicaManager, registry: TopicRegistry, groups: GroupService,
                 clock: Clock, source_host: str | None, backoff_s: float = BACKOFF_S) -> None:  # fmt: skip
        self.replicas = replicas
        self.registry = registry
        self.groups = groups
        self.clock = clock
        self.backoff_s = backoff_s
        self._peers = PeerConnections(replicas.cache, "strom-txn-markers", source_host)

    async def write_local(self, marker: TxnMarker, partitions: tuple[TopicPartition, ...]
                          ) -> dict[TopicPartition, ErrorCode]:  # fmt: skip
        """:func:`write_local` on this broker (the leader's side of WriteTxnMarkers)."""
        return await write_local(self.replicas, self.groups, self.clock, marker, partitions)

    async def write(self, marker: TxnMarker, still_owner: Callable[[], bool]) -> ErrorCode:
        """NONE once every partition of ``marker`` has it; NOT_COORDINATOR when
        ``still_owner()`` turns false first; a fencing error from a leader."""
        remaining = set(marker.partitions)
        tries = 0
        while remaining:
            if not still_owner():
                return E.not_coordinator
            if tries:
                await asyncio.sleep(self.backoff_s)
                if not still_owner():
                    return E.not_coordinator
            tries += 1
            by_leader: dict[int, list[TopicPartition]] = {}
            for tp in sorted(remaining):
                if self.registry.get(tp[0]) is None:  # deleted: nothing to end there
                    remaining.discard(tp)
                    continue
                state = self.replicas.cache.partition(*tp)
                if state is not None and state.leader >= 0:
                    by_leader.setdefault(state.leader, []).append(tp)
            results = await asyncio.gather(*(self._send(leader, marker, tuple(tps))
                                             for leader, tps in by_leader.items()))  # fmt: skip
            for codes in results:
                for tp, code in codes.items():
                    if code == E.none:
                        remaining.discard(tp)
                    elif code in _STOP:
                        log.warning("marker of producer %d to %s-%d refused: %s; not retried",
                                    marker.producer_id, *tp, code.name)  # fmt: skip
                        return code
            if remaining and tries % 50 == 0:
                log.warning("marker of producer %d: %d partitions not written yet after %d tries",
                            marker.producer_id, len(remaining), tries)  # fmt: skip
        return E.none

    async def _send(self, leader: int, marker: TxnMarker,
                    partitions: tuple[TopicPartition, ...]) -> dict[TopicPartition, ErrorCode]:  # fmt: skip
        if leader == self.replicas.node_id:
            return await self.write_local(marker, partitions)
        try:
            conn = self._connection(leader)
            response = await conn.send(API_KEY, VERSION, _request(marker, partitions),
                                       SEND_TIMEOUT_S)  # fmt: skip
        except (BrokerConnectionError, OSError, KafkaError) as exc:
            log.info("WriteTxnMarkers to broker %d failed: %s", leader, exc)
            return {tp: E.network_exception for tp in partitions}
        codes = {tp: E.network_exception for tp in partitions}  # unanswered: retried
        for result in response.markers:
            for topic in result.topics:
                for p in topic.partitions:
                    tp = (str(topic.name), int(p.partition_index))
                    if tp in codes:
                        codes[tp] = E(p.error_code)
        return codes

    def _connection(self, broker_id: int) -> BrokerConnection:
        return self._peers.get(broker_id)

    def close(self) -> None:
        self._peers.close()


def _request(marker: TxnMarker, partitions: tuple[TopicPartition, ...]) -> Any:
    topics: dict[str, list[int]] = {}
    for topic, index in partitions:
        topics.setdefault(topic, []).append(index)
    return build(wtm.WriteTxnMarkersRequest, markers=(build(wtm.WritableTxnMarker,
        producer_id=marker.producer_id, producer_epoch=marker.producer_epoch,
        transaction_result=marker.commit, coordinator_epoch=marker.coordinator_epoch,
        topics=tuple(build(wtm.WritableTxnMarkerTopic, name=t, partition_indexes=tuple(ps))
                     for t, ps in topics.items())),))  # fmt: skip
