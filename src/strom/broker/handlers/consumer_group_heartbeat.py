"""ConsumerGroupHeartbeat (key 68, v0–1): KIP-848's one request of a consumer group member.

Joins (member epoch 0), heartbeats, and leaves (-1; -2: a static member leaving for now); the
answer carries the member's epoch, the heartbeat interval and, when it changed (or the request
was a full one), the partitions the member may read now. v0 lets the coordinator name a new
member; from v1 the client names itself, and may subscribe with a regex
(:mod:`strom.broker.group.consumer`). A group's own ``consumer.session.timeout.ms`` and
``consumer.heartbeat.interval.ms`` (group configs) override the broker's.

Authorization: READ on the GROUP (else GROUP_AUTHORIZATION_FAILED) and DESCRIBE on every
subscribed topic (else TOPIC_AUTHORIZATION_FAILED), as Kafka checks them.
"""

from __future__ import annotations

from typing import Any

from strom.broker import authz, dispatch
from strom.broker.context import RequestContext
from strom.broker.group.consumer import HeartbeatRequest, HeartbeatResult
from strom.broker.group.consumer_records import TopicPartitions
from strom.broker.group.service import millis, wait_for_callback
from strom.protocol.errors import ErrorCode, KafkaError

API_KEY = 68


@dispatch.handler(API_KEY, 0, 1)
async def handle(ctx: RequestContext, request: Any) -> Any:
    authz.require(ctx, authz.READ, authz.GROUP, str(request.group_id))
    owned: TopicPartitions | None = None
    if request.topic_partitions is not None:
        owned = {}
        for tp in request.topic_partitions:
            if tp.topic_id is not None:
                owned[tp.topic_id] = owned.get(tp.topic_id, frozenset()) | frozenset(
                    int(p) for p in tp.partitions)  # fmt: skip
    names = request.subscribed_topic_names
    if names and ctx.services.authorizer is not None:
        hidden = set(names) - authz.allowed_names(ctx, authz.DESCRIBE, authz.TOPIC, names)
        if hidden:
            raise KafkaError(ErrorCode.topic_authorization_failed,
                             f"not authorized to describe topics {sorted(hidden)}")  # fmt: skip
    session, interval = await ctx.groups.consumer_overrides(ctx.configs.store, request.group_id)
    req = HeartbeatRequest(
        group_id=request.group_id, member_id=request.member_id,
        member_epoch=int(request.member_epoch), instance_id=request.instance_id,
        rack_id=request.rack_id, rebalance_timeout_ms=millis(request.rebalance_timeout),
        subscribed_topic_names=tuple(names) if names is not None else None,
        subscribed_topic_regex=getattr(request, "subscribed_topic_regex", None),
        server_assignor=request.server_assignor, owned=owned, client_id=ctx.client_id,
        client_host=f"/{ctx.client_host}", version=ctx.api_version,
        session_timeout_ms=session, heartbeat_interval_ms=interval,
    )  # fmt: skip
    try:
        coord = ctx.groups.active()
    except KafkaError as exc:
        result = HeartbeatResult(exc.error_code, None, request.member_id or None)
    else:
        result = await wait_for_callback(lambda cb: coord.consumer_heartbeat(req, cb))
    assignment = None
    if result.error == 0 and result.assignment is not None:
        assignment = ctx.make("Assignment", topic_partitions=tuple(
            ctx.make("TopicPartitions", topic_id=tid, partitions=tuple(sorted(ps)))
            for tid, ps in sorted(result.assignment.items()) if ps))  # fmt: skip
    failed = result.error != 0
    return ctx.respond(
        throttle_time=0, error_code=result.error, error_message=result.message,
        member_id=None if failed else result.member_id,
        member_epoch=result.member_epoch if not failed else 0,
        heartbeat_interval=result.heartbeat_interval_ms if not failed else 0,
        assignment=assignment,
    )  # fmt: skip
