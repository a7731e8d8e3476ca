"""ShareFetch (key 78, v1–2): acknowledge, then acquire records of share-partitions led here.

One request (KIP-932, Kafka's ``KafkaApis.handleShareFetchRequest``):

1. the share session (:mod:`strom.broker.share.sessions`): epoch 0 opens one with the named
   partitions (acknowledgements are not allowed then: INVALID_REQUEST), a positive epoch must be
   the one expected and adds partitions (``forgotten_topics_data`` removes some), -1 applies
   the acknowledgements and closes the session (nothing is fetched); a session error is the
   answer's top-level error;
2. the piggy-backed acknowledgements, each partition's applied and persisted before the answer
   (its ``acknowledge_error_code``);
3. acquisition from every partition of the session, at most ``max_records`` records (exceeded
   to a batch's end in the default batch-optimized mode; v2 ``share_acquire_mode`` 1 is strict)
   and about ``max_bytes``: the whole batches from the first available offset, with the ranges
   acquired (``acquired_records``, each with its delivery count) — the client keeps only those.
   Fewer than ``min_bytes`` (nothing, with the default 1) waits, up to ``max_wait_ms``, for an
   append, a release or a lock expiry on those partitions, then acquires again.

A partition this broker does not lead is NOT_LEADER_OR_FOLLOWER with the current leader; one
whose share-partition cannot be loaded yet (its share coordinator is moving) comes back empty,
without an error, and is tried again by the next request. The answer names the partitions
with records, errors or acknowledgements (all of the session's when it was opened).
``acquisition_lock_timeout`` is the group's ``share.record.lock.duration.ms``.

Authorization: READ on the GROUP (else the whole request is GROUP_AUTHORIZATION_FAILED) and READ
on each topic the request names (else its partitions are TOPIC_AUTHORIZATION_FAILED: left out of
the share session, nothing acquired or acknowledged in them), as Kafka answers.
"""

from __future__ import annotations

import logging
import uuid
from time import perf_counter
from typing import Any

from strom.broker import authz, dispatch
from strom.broker.context import RequestContext
from strom.broker.share import wire
from strom.broker.share.manager import FetchResult
from strom.broker.share.sessions import FINAL_EPOCH, INITIAL_EPOCH
from strom.broker.share.settings import ShareSettings
from strom.protocol.errors import ErrorCode, KafkaError

API_KEY = 78
log = logging.getLogger(__name__)
E = ErrorCode
#: load errors that mean "not ready here yet" (an empty answer, asked again), not a failure
NOT_READY = frozenset({E.coordinator_not_available, E.coordinator_load_in_progress,
                       E.not_coordinator, E.request_timed_out, E.not_enough_replicas,
                       E.not_enough_replicas_after_append})  # fmt: skip
Part = tuple[uuid.UUID, int]


@dispatch.handler(API_KEY, 1, 2)
async def handle(ctx: RequestContext, request: Any) -> Any:
    authz.require(ctx, authz.READ, authz.GROUP, str(request.group_id or ""))
    shares = ctx.shares
    manager = shares.manager
    group = str(request.group_id or "")
    member = str(request.member_id or "")
    epoch = int(request.share_session_epoch)
    settings = await shares.settings.get(group) if group else shares.settings.peek(group)

    def answer(code: ErrorCode, message: str | None = None, topics: tuple[Any, ...] = (),
               leaders: list[int] | None = None) -> Any:  # fmt: skip
        if code:
            ctx.metrics.request_error(API_KEY, code)
        return ctx.respond(throttle_time=0, error_code=code, error_message=message,
                           acquisition_lock_timeout=settings.lock_ms, responses=topics,
                           node_endpoints=wire.node_endpoints(ctx, leaders or []))  # fmt: skip

    if not group:
        return answer(E.invalid_request, "The group id is empty.")
    if not member:
        return answer(E.invalid_request, "The member id is empty.")
    denied_ids = authz.denied_topic_ids(ctx, authz.READ, (t.topic_id for t in request.topics))
    denied: list[Part] = [(t.topic_id, int(p.partition_index)) for t in request.topics
                          if t.topic_id in denied_ids for p in t.partitions]  # fmt: skip
    requested: list[Part] = [(t.topic_id, int(p.partition_index)) for t in request.topics
                             if t.topic_id not in denied_ids for p in t.partitions]  # fmt: skip
    acks = {tp: batches for tp, batches
            in wire.acknowledgements(request.topics, "acknowledgement_batches").items()
            if tp[0] not in denied_ids}  # fmt: skip
    now = ctx.clock.time_ms()
    if epoch == INITIAL_EPOCH:
        if acks:
            return answer(E.invalid_request,
                          "Acknowledgements are not allowed in a request opening a share session.")  # fmt: skip
        code, session, old = manager.sessions.open(group, member, ctx.connection_id, requested, now)
        manager.release_session(old)
    else:
        code, session = manager.sessions.use(group, member, epoch, now)
        if code == E.invalid_share_session_epoch:
            manager.release_session(session)
    if code or session is None:
        return answer(code or E.share_session_not_found)
    if epoch > 0:
        session.partitions.update(dict.fromkeys(requested))
        for t in request.forgotten_topics_data:
            for index in t.partitions:
                session.partitions.pop((t.topic_id, int(index)), None)
    renew_request = bool(getattr(request, "is_renew_ack", False))  # v2: renew, fetch nothing
    renew = renew_request and settings.renew_enabled
    ack_results: dict[Part, tuple[ErrorCode, str | None]] = {}
    for (tid, index), batches in acks.items():
        ack_results[(tid, index)] = await manager.acknowledge(group, member, tid, index, batches,
                                                              renew)  # fmt: skip
    fetched: dict[Part, FetchResult] = {}
    if epoch == FINAL_EPOCH:
        manager.sessions.close(group, member)
        manager.release_session(session)
    elif int(request.max_records) > 0 and not renew_request:
        parts = list(session.partitions)
        fetched = await _fetch(ctx, group, member, parts, request, settings)
    shown = dict.fromkeys(session.partitions if epoch == INITIAL_EPOCH else ())
    shown.update(dict.fromkeys([*ack_results, *fetched]))
    topics: dict[uuid.UUID, list[Any]] = {}
    leaders: list[int] = []
    for tid, index in shown:
        result = fetched.get((tid, index), FetchResult())
        ack_code, ack_message = ack_results.get((tid, index), (E.none, None))
        leader = (-1, -1)
        if result.error in wire.LEADER_ERRORS or ack_code in wire.LEADER_ERRORS:
            leader = wire.current_leader(ctx, tid, index)
            leaders.append(leader[0])
        if result.error:
            ctx.metrics.request_error(API_KEY, result.error)
        topics.setdefault(tid, []).append(ctx.make(
            "PartitionData", partition_index=index, error_code=result.error,
            error_message=result.message, acknowledge_error_code=ack_code,
            acknowledge_error_message=ack_message,
            current_leader=ctx.make("LeaderIdAndEpoch", leader_id=leader[0], leader_epoch=leader[1]),
            records=result.records,
            acquired_records=tuple(ctx.make("AcquiredRecords", first_offset=a.first,
                                            last_offset=a.last, delivery_count=a.deliveries)
                                   for a in result.acquired),
        ))  # fmt: skip
    for tid, index in denied:
        topics.setdefault(tid, []).append(ctx.make(
            "PartitionData", partition_index=index, error_code=E.topic_authorization_failed,
            error_message=None, acknowledge_error_code=E.none, acknowledge_error_message=None,
            current_leader=ctx.make("LeaderIdAndEpoch", leader_id=-1, leader_epoch=-1),
            records=b"", acquired_records=()))  # fmt: skip
    return answer(E.none, None, tuple(
        ctx.make("ShareFetchableTopicResponse", topic_id=tid, partitions=tuple(parts))
        for tid, parts in topics.items()), leaders)  # fmt: skip


async def _fetch(ctx: RequestContext, group: str, member: str, parts: list[Part], request: Any,
                 settings: ShareSettings) -> dict[Part, FetchResult]:  # fmt: skip
    """Acquire from ``parts`` until ``min_bytes`` are acquired, an error, or ``max_wait``."""
    max_records = int(request.max_records)
    max_bytes = int(getattr(request, "max_bytes", 2**31 - 1))
    min_bytes = max(int(request.min_bytes), 1)
    strict = ctx.api_version >= 2 and int(getattr(request, "share_acquire_mode", 0)) == 1
    loop_time = ctx.clock.monotonic
    deadline = loop_time() + request.max_wait.total_seconds()
    results: dict[Part, FetchResult] = {}
    keys: list[tuple[str, int]] = []
    while True:
        taken = size = 0
        errors = False
        keys = []
        for tid, index in parts:
            if (tid, index) in results and results[(tid, index)].acquired:
                continue  # acquired on an earlier pass: kept
            if taken >= max_records or size >= max_bytes:
                break
            result = await _one(ctx, group, member, tid, index, max_records - taken,
                                max_bytes - size, settings, strict)  # fmt: skip
            results[(tid, index)] = result
            if result.error:
                errors = True
            info = ctx.topics.by_id(tid)
            if info is not None:
                keys.append((info.name, index))
        for r in results.values():
            taken += sum(a.last - a.first + 1 for a in r.acquired)
            size += len(r.records)
        remaining = deadline - loop_time()
        if size >= min_bytes or errors or remaining <= 0 or not keys:
            break
        parked = perf_counter()
        await ctx.replicas.purgatory.wait(keys, remaining)
        ctx.remote_time += perf_counter() - parked
    for (tid, _index), r in results.items():
        info = ctx.topics.by_id(tid)
        if r.records and info is not None:
            ctx.metrics.topic(info.name).bytes_out += len(r.records)
    return {p: r for p, r in results.items() if r.acquired or r.error}


async def _one(ctx: RequestContext, group: str, member: str, topic_id: uuid.UUID, index: int,
               max_records: int, max_bytes: int, settings: ShareSettings,
               strict: bool) -> FetchResult:  # fmt: skip
    manager = ctx.shares.manager
    try:
        sp = await manager.partition(group, topic_id, index, settings)
        return manager.acquire(sp, member, max_records, max_bytes, settings.read_committed, strict)
    except KafkaError as exc:
        if exc.error_code in NOT_READY:
            log.debug("share-partition %s %s-%d not ready: %s", group, topic_id, index, exc)
            return FetchResult()
        return FetchResult(exc.error_code, str(exc))
