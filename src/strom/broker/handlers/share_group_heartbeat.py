"""ShareGroupHeartbeat (key 76, v1): join, stay in, or leave a share group (KIP-932).

Answered by the group's coordinator (:mod:`strom.broker.share.groups`): the member's epoch,
the heartbeat interval (``share.heartbeat.interval.ms``) and, when it changed, the member's
assignment as topic ids and partitions. Newly assigned share-partitions get their state
initialized in the background.

Authorization: READ on the GROUP, else the whole request is GROUP_AUTHORIZATION_FAILED.

Authorization: READ on the GROUP (else GROUP_AUTHORIZATION_FAILED) and DESCRIBE on every
subscribed topic (else TOPIC_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import Any

from strom.broker import authz, dispatch
from strom.broker.context import RequestContext
from strom.protocol.errors import ErrorCode, KafkaError

API_KEY = 76


@dispatch.handler(API_KEY, 1, 1)
async def handle(ctx: RequestContext, request: Any) -> Any:
    authz.require(ctx, authz.READ, authz.GROUP, str(request.group_id))
    subscribed = request.subscribed_topic_names
    if subscribed and ctx.services.authorizer is not None:
        hidden = set(subscribed) - authz.allowed_names(ctx, authz.DESCRIBE, authz.TOPIC, subscribed)
        if hidden:
            raise KafkaError(ErrorCode.topic_authorization_failed,
                             f"not authorized to describe topics {sorted(hidden)}")  # fmt: skip
    result = await ctx.shares.heartbeat(
        str(request.group_id or ""), str(request.member_id or ""), int(request.member_epoch),
        request.rack_id, list(subscribed) if subscribed is not None else None, ctx.client_id,
        f"/{ctx.client_host}",
    )  # fmt: skip
    if result.error:
        ctx.metrics.request_error(API_KEY, result.error)
    assignment = None
    if result.assignment is not None:
        assignment = ctx.make("Assignment", topic_partitions=tuple(
            ctx.make("TopicPartitions", topic_id=tid, partitions=tuple(parts))
            for tid, parts in sorted(result.assignment.items())))  # fmt: skip
    return ctx.respond(
        throttle_time=0, error_code=result.error, error_message=result.message,
        member_id=result.member_id, member_epoch=result.member_epoch,
        heartbeat_interval=result.heartbeat_interval_ms, assignment=assignment,
    )  # fmt: skip
