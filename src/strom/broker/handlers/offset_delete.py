"""OffsetDelete (key 47, v0): delete committed offsets of a group for some partitions.

Refused per partition (GROUP_SUBSCRIBED_TO_TOPIC) for topics an active consumer group
subscribes to; GROUP_ID_NOT_FOUND for an unknown group.

Authorization: DELETE on the GROUP (else GROUP_AUTHORIZATION_FAILED) and READ on each topic (else
its partitions are TOPIC_AUTHORIZATION_FAILED and keep their offsets).
"""

from __future__ import annotations

from typing import Any

from strom.broker import authz, dispatch
from strom.broker.context import RequestContext
from strom.protocol.errors import ErrorCode, KafkaError

API_KEY = 47


@dispatch.handler(API_KEY, 0, 0)
async def handle(ctx: RequestContext, request: Any) -> Any:
    if not authz.authorize(ctx, authz.DELETE, authz.GROUP, str(request.group_id)):
        return ctx.respond(throttle_time=0, error_code=ErrorCode.group_authorization_failed,
                           topics=())  # fmt: skip
    readable = authz.allowed_names(ctx, authz.READ, authz.TOPIC, {t.name for t in request.topics})
    wanted = [(t.name, int(p.partition_index)) for t in request.topics for p in t.partitions
              if t.name in readable]  # fmt: skip
    try:
        top, codes = ctx.groups.active().delete_offsets(request.group_id, wanted)
    except KafkaError as exc:
        top, codes = exc.error_code, {}
    codes = {**codes, **{(t.name, int(p.partition_index)): ErrorCode.topic_authorization_failed
                         for t in request.topics if t.name not in readable
                         for p in t.partitions}}  # fmt: skip
    if top != ErrorCode.none:
        return ctx.respond(throttle_time=0, error_code=top, topics=())
    topics = tuple(
        ctx.make(
            "OffsetDeleteResponseTopic",
            name=t.name,
            partitions=tuple(
                ctx.make(
                    "OffsetDeleteResponsePartition",
                    partition_index=p.partition_index,
                    error_code=codes.get((t.name, int(p.partition_index)), ErrorCode.none),
                )
                for p in t.partitions
            ),
        )
        for t in request.topics
    )
    return ctx.respond(throttle_time=0, error_code=ErrorCode.none, topics=topics)
