"""ShareAcknowledge (key 79, v1–2): acknowledge acquired records without fetching more.

The request belongs to the member's share session here (its epoch as in ShareFetch; epoch 0 is
INVALID_SHARE_SESSION_EPOCH: a session is opened by ShareFetch only; -1 closes the session
after the acknowledgements, releasing what the member still holds). Each partition's
acknowledgements are applied and persisted before the answer (ACCEPT, RELEASE, REJECT, and on
v2 RENEW when ``is_renew_ack``); a partition's error is INVALID_RECORD_STATE when it names
records the member does not hold, NOT_LEADER_OR_FOLLOWER (with the current leader) when this
broker does not lead the partition.

Authorization: READ on the GROUP (else the whole request is GROUP_AUTHORIZATION_FAILED) and READ
on each topic (else its partitions are TOPIC_AUTHORIZATION_FAILED, nothing of them
acknowledged), as Kafka answers.
"""

from __future__ import annotations

import uuid
from typing import Any

from strom.broker import authz, dispatch
from strom.broker.context import RequestContext
from strom.broker.share import wire
from strom.broker.share.sessions import FINAL_EPOCH, INITIAL_EPOCH
from strom.protocol.errors import ErrorCode

API_KEY = 79
E = ErrorCode


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

    if not group or not member:
        return answer(E.invalid_request, "The group id and the member id must be set.")
    if epoch == INITIAL_EPOCH:
        return answer(E.invalid_share_session_epoch,
                      "ShareAcknowledge cannot open a share session.")  # fmt: skip
    code, session = manager.sessions.use(group, member, epoch, ctx.clock.time_ms())
    if code == E.invalid_share_session_epoch:
        manager.release_session(session)
    if code or session is None:
        return answer(code or E.share_session_not_found)
    renew = bool(getattr(request, "is_renew_ack", False)) and settings.renew_enabled
    results: dict[tuple[uuid.UUID, int], tuple[ErrorCode, str | None]] = {}
    denied = authz.denied_topic_ids(ctx, authz.READ, (t.topic_id for t in request.topics))
    for (tid, index), batches in wire.acknowledgements(request.topics, "acknowledgement_batches").items():
        if tid in denied:  # refused, nothing acknowledged (Kafka's per-topic answer)
            results[(tid, index)] = (E.topic_authorization_failed, "not authorized to READ it")
            continue
        results[(tid, index)] = await manager.acknowledge(group, member, tid, index, batches, renew)
    if epoch == FINAL_EPOCH:
        manager.sessions.close(group, member)
        manager.release_session(session)
    topics: dict[uuid.UUID, list[Any]] = {}
    leaders: list[int] = []
    for (tid, index), (code, message) in results.items():
        leader = (-1, -1)
        if code in wire.LEADER_ERRORS:
            leader = wire.current_leader(ctx, tid, index)
            leaders.append(leader[0])
        if code:
            ctx.metrics.request_error(API_KEY, code)
        topics.setdefault(tid, []).append(ctx.make(
            "PartitionData", partition_index=index, error_code=code, error_message=message,
            current_leader=ctx.make("LeaderIdAndEpoch", leader_id=leader[0], leader_epoch=leader[1]),
        ))  # fmt: skip
    return answer(E.none, None, tuple(
        ctx.make("ShareAcknowledgeTopicResponse", topic_id=tid, partitions=tuple(parts))
        for tid, parts in topics.items()), leaders)  # fmt: skip
