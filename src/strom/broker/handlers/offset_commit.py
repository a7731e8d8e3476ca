"""OffsetCommit (key 8, v2–10): store a group's committed offsets in ``__consumer_offsets``.

Members commit with their member id and generation (a KIP-848 consumer group's members with
their member epoch, from v9: STALE_MEMBER_EPOCH when it is not their current one); generation
-1 with no member id is a "simple" commit (allowed while the group has no members). Partitions of unknown topics get
UNKNOWN_TOPIC_OR_PARTITION; v6+ carries the leader epoch, stored with the offset and metadata.
v10 names topics by id: an id no topic has gets UNKNOWN_TOPIC_ID. Answered once the commit is
replicated; until then (and for good if it fails) OffsetFetch shows the previous offset.

Authorization: READ on the GROUP (else every partition is GROUP_AUTHORIZATION_FAILED) and READ on
each topic (else its partitions are TOPIC_AUTHORIZATION_FAILED and nothing of them is committed).
"""

from __future__ import annotations

from typing import Any

from strom.broker import authz, dispatch
from strom.broker.context import RequestContext
from strom.broker.group.model import OffsetEntry
from strom.broker.group.service import wait_for_callback
from strom.protocol.errors import ErrorCode, KafkaError

API_KEY = 8


def topic_name(ctx: RequestContext, topic: Any) -> str | None:
    """The request topic's name; v10+ names topics by id (None when no topic has it)."""
    if not hasattr(topic, "topic_id") or hasattr(topic, "name"):
        return str(topic.name)
    info = ctx.topics.by_id(topic.topic_id) if topic.topic_id else None
    return info.name if info is not None else None


@dispatch.handler(API_KEY, 2, 10)
async def handle(ctx: RequestContext, request: Any) -> Any:
    authz.require(ctx, authz.READ, authz.GROUP, str(request.group_id))
    codes: dict[tuple[str, int], ErrorCode] = {}
    wanted: dict[tuple[str, int], OffsetEntry] = {}
    names = [topic_name(ctx, topic) for topic in request.topics]
    for topic, name in zip(request.topics, names, strict=True):
        if name is None:
            continue  # an unknown topic id: UNKNOWN_TOPIC_ID below
        info = ctx.topics.get(name)
        readable = authz.authorize(ctx, authz.READ, authz.TOPIC, name)
        for p in topic.partitions:
            tp = (name, int(p.partition_index))
            if not readable:
                codes[tp] = ErrorCode.topic_authorization_failed
            elif info is None or tp[1] not in info.replicas:
                codes[tp] = ErrorCode.unknown_topic_or_partition
            else:
                wanted[tp] = OffsetEntry(
                    int(p.committed_offset),
                    int(getattr(p, "committed_leader_epoch", -1)),
                    p.committed_metadata or "",
                )
    if wanted:
        # answered once the commit is replicated (Kafka's offsets.commit.required.acks=-1): an
        # acknowledged commit survives the loss of this coordinator
        try:
            coord = ctx.groups.active()
        except KafkaError as exc:
            codes.update({tp: exc.error_code for tp in wanted})
        else:
            answer: dict[tuple[str, int], ErrorCode] = await wait_for_callback(
                lambda cb: coord.commit_offsets(
                    request.group_id, request.member_id,
                    getattr(request, "group_instance_id", None),
                    int(request.generation_id_or_member_epoch), wanted, cb, ctx.api_version,
                )
            )  # fmt: skip
            codes.update(answer)
    topics = []
    for topic, name in zip(request.topics, names, strict=True):
        parts = tuple(
            ctx.make(
                "OffsetCommitResponsePartition",
                partition_index=p.partition_index,
                error_code=(
                    ErrorCode.unknown_topic_id
                    if name is None
                    else codes[(name, int(p.partition_index))]
                ),
            )
            for p in topic.partitions
        )
        topics.append(
            ctx.make(
                "OffsetCommitResponseTopic",
                name=name,
                topic_id=getattr(topic, "topic_id", None),
                partitions=parts,
            )
        )
    return ctx.respond(throttle_time=0, topics=tuple(topics))
