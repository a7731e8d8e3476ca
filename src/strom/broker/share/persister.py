"""The client side of the share-group state APIs (Kafka's ``DefaultStatePersister``).

Share-partition leaders (loading and writing a share-partition's state) and the group
coordinator (initializing, describing, resetting and deleting it) reach the share coordinator
through here. A key ``(group, topic id, partition)`` belongs to the coordinator leading its
``__share_group_state`` partition (:func:`~strom.broker.share.coordinator.partition_for_key`),
as the metadata cache knows it: this broker's own :class:`ShareStateService` is called
directly, another broker gets the request (InitializeShareGroupState 83 v0,
ReadShareGroupState 84 v0, WriteShareGroupState 85 v1, DeleteShareGroupState 86 v0,
ReadShareGroupStateSummary 87 v1) over a :class:`~strom.replication.peers.PeerConnections`
connection.

The first use creates ``__share_group_state`` (:class:`~strom.broker.internal_topics.InternalTopics`).
Answers meaning "the coordinator is elsewhere or not ready" (NOT_COORDINATOR,
COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, a broker not reachable, a partition
without leader or below its min ISR) are retried, looking the coordinator up again, every
``BACKOFF_S`` until ``timeout_s``; then the last error is returned. Other errors are answers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from strom.broker.internal_topics import SHARE_STATE_TOPIC
from strom.broker.share.coordinator import Key, ReadResult, coordinator_key, partition_for_key
from strom.broker.share.state import Batch
from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.messages import build, request_class, request_module
from strom.replication.connection import BrokerConnectionError

if TYPE_CHECKING:
    from strom.broker.internal_topics import InternalTopics
    from strom.broker.share.state_service import ShareStateService
    from strom.replication.peers import PeerConnections
    from strom.replication.replica_manager import ReplicaManager

log = logging.getLogger(__name__)
E = ErrorCode
T = TypeVar("T")
BACKOFF_S = 0.1
TIMEOUT_S = 15.0
REQUEST_TIMEOUT_S = 10.0
INITIALIZE, READ, WRITE, DELETE, SUMMARY = 83, 84, 85, 86, 87
VERSIONS = {INITIALIZE: 0, READ: 0, WRITE: 1, DELETE: 0, SUMMARY: 1}
RETRIABLE = frozenset({E.not_coordinator, E.coordinator_load_in_progress,
                       E.coordinator_not_available, E.broker_not_available,
                       E.not_leader_or_follower, E.leader_not_available, E.not_enough_replicas,
                       E.not_enough_replicas_after_append, E.request_timed_out,
                       E.unknown_topic_or_partition})  # fmt: skip


class _Retry(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class Persister:
    def __init__(self, state: ShareStateService, replicas: ReplicaManager,
                 internal_topics: InternalTopics, peers: PeerConnections, node_id: int,
                 timeout_s: float = TIMEOUT_S) -> None:  # fmt: skip
        self.state = state
        self.replicas = replicas
        self.internal_topics = internal_topics
        self.peers = peers
        self.node_id = node_id
        self.timeout_s = timeout_s

    # --- the five operations -------------------------------------------------------------------
    async def initialize(self, key: Key, state_epoch: int, start_offset: int
                         ) -> tuple[ErrorCode, str | None]:  # fmt: skip
        async def local() -> tuple[ErrorCode, str | None]:
            return await self.state.initialize(key, state_epoch, start_offset)

        async def remote(resp: Any) -> tuple[ErrorCode, str | None]:
            p = _partition_result(resp)
            return ErrorCode(int(p.error_code)), p.error_message

        return await self._call(key, INITIALIZE, local, remote, _failed_pair, lambda m: dict(
            topics=(build(m.InitializeStateData, topic_id=key[1], partitions=(
                build(m.PartitionData, partition=key[2], state_epoch=state_epoch,
                      start_offset=start_offset),)),)))  # fmt: skip

    async def read(self, key: Key, leader_epoch: int) -> ReadResult:
        async def local() -> ReadResult:
            return await self.state.read(key, leader_epoch)

        async def remote(resp: Any) -> ReadResult:
            p = _partition_result(resp)
            return ReadResult(ErrorCode(int(p.error_code)), p.error_message, int(p.state_epoch),
                              int(p.start_offset),
                              tuple(Batch(int(b.first_offset), int(b.last_offset),
                                          int(b.delivery_state), int(b.delivery_count))
                                    for b in p.state_batches), leader_epoch)  # fmt: skip

        return await self._call(key, READ, local, remote, lambda c, m: ReadResult(c, m), lambda m: dict(
            topics=(build(m.ReadStateData, topic_id=key[1], partitions=(
                build(m.PartitionData, partition=key[2], leader_epoch=leader_epoch),)),)))  # fmt: skip

    async def write(self, key: Key, state_epoch: int, leader_epoch: int, start_offset: int,
                    delivery_complete_count: int, batches: list[Batch]
                    ) -> tuple[ErrorCode, str | None]:  # fmt: skip
        async def local() -> tuple[ErrorCode, str | None]:
            return await self.state.write(key, state_epoch, leader_epoch, start_offset,
                                          delivery_complete_count, batches)  # fmt: skip

        async def remote(resp: Any) -> tuple[ErrorCode, str | None]:
            p = _partition_result(resp)
            return ErrorCode(int(p.error_code)), p.error_message

        return await self._call(key, WRITE, local, remote, _failed_pair, lambda m: dict(
            topics=(build(m.WriteStateData, topic_id=key[1], partitions=(
                build(m.PartitionData, partition=key[2], state_epoch=state_epoch,
                      leader_epoch=leader_epoch, start_offset=start_offset,
                      delivery_complete_count=delivery_complete_count,
                      state_batches=tuple(build(m.StateBatch, first_offset=b.first,
                                                last_offset=b.last, delivery_state=b.state,
                                                delivery_count=b.deliveries) for b in batches)),)),)))  # fmt: skip

    async def delete(self, key: Key) -> ErrorCode:
        async def local() -> ErrorCode:
            return await self.state.delete(key)

        async def remote(resp: Any) -> ErrorCode:
            return ErrorCode(int(_partition_result(resp).error_code))

        return await self._call(key, DELETE, local, remote, lambda c, _m: c, lambda m: dict(
            topics=(build(m.DeleteStateData, topic_id=key[1], partitions=(
                build(m.PartitionData, partition=key[2]),)),)))  # fmt: skip

    async def summary(self, key: Key, leader_epoch: int = -1) -> ReadResult:
        async def local() -> ReadResult:
            return await self.state.summary(key, leader_epoch)

        async def remote(resp: Any) -> ReadResult:
            p = _partition_result(resp)
            return ReadResult(ErrorCode(int(p.error_code)), p.error_message, int(p.state_epoch),
                              int(p.start_offset), (), int(p.leader_epoch),
                              int(p.delivery_complete_count))  # fmt: skip

        return await self._call(key, SUMMARY, local, remote, lambda c, m: ReadResult(c, m), lambda m: dict(
            topics=(build(m.ReadStateSummaryData, topic_id=key[1], partitions=(
                build(m.PartitionData, partition=key[2], leader_epoch=leader_epoch),)),)))  # fmt: skip

    # --- routing and retries -----------------------------------------------------------------
    async def _call(self, key: Key, api_key: int, local: Callable[[], Awaitable[T]],
                    remote: Callable[[Any], Awaitable[T]],
                    failed: Callable[[ErrorCode, str], T],
                    fields: Callable[[Any], dict[str, Any]]) -> T:  # fmt: skip
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        last = (E.coordinator_not_available, "no share coordinator found")
        while True:
            try:
                answer = await self._once(key, api_key, local, remote, fields)
                code = _code_of(answer)
                if code not in RETRIABLE:
                    return answer
                last = (code, f"{code.name} from the share coordinator")
            except _Retry as exc:
                if exc.code not in RETRIABLE:
                    return failed(exc.code, str(exc))
                last = (exc.code, str(exc))
            if loop.time() + BACKOFF_S > deadline:
                log.info("share state %s of %s: %s", api_key, coordinator_key(key), last[1])
                return failed(last[0], last[1])
            await asyncio.sleep(BACKOFF_S)

    async def _once(self, key: Key, api_key: int, local: Callable[[], Awaitable[T]],
                    remote: Callable[[Any], Awaitable[T]],
                    fields: Callable[[Any], dict[str, Any]]) -> T:  # fmt: skip
        info = await self.internal_topics.ensure(SHARE_STATE_TOPIC)
        if info is None:
            raise _Retry(E.coordinator_not_available, f"{SHARE_STATE_TOPIC} is being created")
        partition = partition_for_key(coordinator_key(key), info.partition_count)
        state = self.replicas.cache.partition(SHARE_STATE_TOPIC, partition)
        if state is None or state.leader < 0:
            raise _Retry(E.coordinator_not_available, f"{SHARE_STATE_TOPIC}-{partition} has no leader")
        if state.leader == self.node_id:
            try:
                return await local()
            except KafkaError as exc:
                raise _Retry(exc.error_code, str(exc)) from None
        version = VERSIONS[api_key]
        module = request_module(api_key, version)
        request = build(request_class(api_key, version), group_id=key[0], **fields(module))
        try:
            conn = self.peers.get(state.leader)
            resp = await conn.send(api_key, version, request, REQUEST_TIMEOUT_S)
        except (BrokerConnectionError, OSError) as exc:
            raise _Retry(E.coordinator_not_available, f"broker {state.leader}: {exc}") from None
        except KafkaError as exc:
            raise _Retry(exc.error_code, str(exc)) from None
        return await remote(resp)


def _partition_result(resp: Any) -> Any:
    (result,) = resp.results
    (part,) = result.partitions
    return part


def _code_of(answer: Any) -> ErrorCode:
    if isinstance(answer, ReadResult):
        return answer.error
    if isinstance(answer, tuple):
        return ErrorCode(answer[0])
    return ErrorCode(answer)


def _failed_pair(code: ErrorCode, message: str) -> tuple[ErrorCode, str | None]:
    return code, message

