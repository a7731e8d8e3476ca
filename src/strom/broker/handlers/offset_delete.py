"""OffsetDelete (key 47, v0): delete committed offsets of a group for some partitions.

Refused per partition (GROUP_SUBSCRIBED_TO_TOPIC) for topics an active consumer group
subscribes to; GROUP_ID_NOT_FOUND for an unknown group.
"""

from __future__ import annotations

from typing import Any

from strom.broker import dispatch
from strom.broker.context import RequestContext
from strom.protocol.errors import ErrorCode, KafkaError

API_KEY = 47


@dispatch.handler(API_KEY, 0, 0)
async def handle(ctx: RequestContext, request: Any) -> Any:
    wanted = [(t.name, int(p.partition_index)) for t in request.topics for p in t.partitions]
    try:
        top, codes = ctx.groups.active().delete_offsets(request.group_id, wanted)
    except KafkaError as exc:
        top, codes = exc.error_code, {}
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
