"""OffsetCommit (key 8, v2–9): store a group's committed offsets in ``__consumer_offsets``.

Members commit with their member id and generation; generation -1 with no member id is a
"simple" commit (allowed while the group has no members). Partitions of unknown topics get
UNKNOWN_TOPIC_OR_PARTITION; v6+ carries the leader epoch, stored with the offset and metadata.
"""

from __future__ import annotations

from typing import Any

from strom.broker import dispatch
from strom.broker.context import RequestContext
from strom.broker.group.model import OffsetEntry
from strom.broker.group.service import coordinator_of
from strom.protocol.errors import ErrorCode, KafkaError

API_KEY = 8


@dispatch.handler(API_KEY, 2, 9)
async def handle(ctx: RequestContext, request: Any) -> Any:
    codes: dict[tuple[str, int], ErrorCode] = {}
    wanted: dict[tuple[str, int], OffsetEntry] = {}
    for topic in request.topics:
        info = ctx.broker.topics.get(topic.name)
        for p in topic.partitions:
            tp = (topic.name, int(p.partition_index))
            if info is None or tp[1] not in info.replicas:
                codes[tp] = ErrorCode.unknown_topic_or_partition
            else:
                wanted[tp] = OffsetEntry(
                    int(p.committed_offset),
                    int(getattr(p, "committed_leader_epoch", -1)),
                    p.committed_metadata or "",
                )
    if wanted:
        try:
            codes.update(
                coordinator_of(ctx.broker).commit_offsets(
                    request.group_id,
                    request.member_id,
                    getattr(request, "group_instance_id", None),
                    int(request.generation_id_or_member_epoch),
                    wanted,
                )
            )
        except KafkaError as exc:
            codes.update({tp: exc.error_code for tp in wanted})
    topics = []
    for topic in request.topics:
        parts = tuple(
            ctx.make(
                "OffsetCommitResponsePartition",
                partition_index=p.partition_index,
                error_code=codes[(topic.name, int(p.partition_index))],
            )
            for p in topic.partitions
        )
        topics.append(ctx.make("OffsetCommitResponseTopic", name=topic.name, partitions=parts))
    return ctx.respond(throttle_time=0, topics=tuple(topics))
