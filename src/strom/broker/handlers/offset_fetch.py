"""OffsetFetch (key 9, v1–10): committed offsets of a group (v8+: of several groups at once).

A partition with nothing committed answers offset -1, empty metadata, no error. ``topics`` null
(v2+) means every partition the group has an offset for. With ``require_stable`` (v7+,
KIP-447) a partition whose offset is pending in an open transaction (TxnOffsetCommit before the
marker) answers UNSTABLE_OFFSET_COMMIT, which clients retry: a consumer taking over never
starts from an offset an open transaction is about to replace. v10 names topics by id:
an id no topic has is answered per partition with UNKNOWN_TOPIC_ID, and offsets of a deleted
topic (which has no id any more) are left out. From v9 a KIP-848 consumer group's member names
itself and its member epoch: an unknown member or a stale epoch is the group's error
(UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH; ILLEGAL_GENERATION for a classic member).

Authorization: DESCRIBE on the GROUP (else GROUP_AUTHORIZATION_FAILED); DESCRIBE on each topic: a
named topic's partitions are TOPIC_AUTHORIZATION_FAILED, and an all-topics fetch leaves the topic
out.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from strom.broker import authz, dispatch
from strom.broker.context import RequestContext
from strom.broker.handlers.offset_commit import topic_name
from strom.protocol.errors import ErrorCode, KafkaError

API_KEY = 9


def _group_topics(
    ctx: RequestContext, group_id: str, topics: Any, partition_cls: str, topic_cls: str,
    require_stable: bool = False, member: tuple[str | None, int] | None = None,
) -> tuple[ErrorCode, tuple[Any, ...]]:  # fmt: skip
    if not authz.authorize(ctx, authz.DESCRIBE, authz.GROUP, group_id):
        return ErrorCode.group_authorization_failed, ()
    by_id = ctx.api_version >= 10
    unstable: set[tuple[str, int]] = set()
    wanted: list[tuple[str, int]] | None = None
    unknown_ids: list[Any] = []  # v10: request topics whose id no topic has
    if topics is not None:
        wanted = []
        for t in topics:
            name = topic_name(ctx, t)
            if name is None:
                unknown_ids.append(t)
            else:
                wanted.extend((name, int(p)) for p in t.partition_indexes)
    try:
        coord = ctx.groups.active()
        if member is not None and (refused := coord.check_offset_fetch(group_id, *member)) is not None:
            return refused, ()
        found = coord.fetch_offsets(group_id, wanted)
        error = ErrorCode.none
        if require_stable:
            unstable = {tp for tp in found if coord.has_pending_txn_offset(group_id, tp)}
    except KafkaError as exc:
        found = dict.fromkeys(wanted or [])
        error = exc.error_code
    by_topic: dict[str, list[Any]] = defaultdict(list)
    denied = (set() if ctx.services.authorizer is None else
              {t for t, _ in found} - authz.allowed_names(ctx, authz.DESCRIBE, authz.TOPIC,
                                                          {t for t, _ in found}))  # fmt: skip
    for (topic, partition), entry in found.items():
        if topic in denied:
            if wanted is not None:  # named: refused; asked for all: left out
                by_topic[topic].append(ctx.make(
                    partition_cls, partition_index=partition, committed_offset=-1,
                    committed_leader_epoch=-1, metadata="",
                    error_code=ErrorCode.topic_authorization_failed))  # fmt: skip
            continue
        if (topic, partition) in unstable:
            by_topic[topic].append(ctx.make(
                partition_cls, partition_index=partition, committed_offset=-1,
                committed_leader_epoch=-1, metadata="", error_code=ErrorCode.unstable_offset_commit,
            ))  # fmt: skip
            continue
        by_topic[topic].append(
            ctx.make(
                partition_cls,
                partition_index=partition,
                committed_offset=entry.offset if entry else -1,
                committed_leader_epoch=entry.leader_epoch if entry else -1,
                metadata=entry.metadata if entry else "",
                error_code=error if ctx.api_version < 2 else ErrorCode.none,
            )
        )
    result = []
    for name, parts in by_topic.items():
        info = ctx.topics.get(name) if by_id else None
        if by_id and info is None:
            continue  # a deleted topic has no id to answer with
        result.append(
            ctx.make(
                topic_cls,
                name=name,
                **({"topic_id": info.topic_id} if info is not None else {}),  # v10's struct only
                partitions=tuple(parts),
            )
        )
    for t in unknown_ids:
        parts = [
            ctx.make(
                partition_cls, partition_index=p, committed_offset=-1, committed_leader_epoch=-1,
                metadata="", error_code=ErrorCode.unknown_topic_id,
            )  # fmt: skip
            for p in t.partition_indexes
        ]
        result.append(ctx.make(topic_cls, topic_id=t.topic_id, partitions=tuple(parts)))
    return error, tuple(result)


@dispatch.handler(API_KEY, 1, 10)
async def handle(ctx: RequestContext, request: Any) -> Any:
    if ctx.api_version >= 8:
        groups = []
        for g in request.groups:
            error, topics = _group_topics(
                ctx,
                g.group_id,
                g.topics,
                "OffsetFetchResponsePartitions",
                "OffsetFetchResponseTopics",
                bool(request.require_stable),
                (g.member_id, int(g.member_epoch)) if ctx.api_version >= 9 else None,
            )
            groups.append(
                ctx.make(
                    "OffsetFetchResponseGroup", group_id=g.group_id, topics=topics, error_code=error
                )
            )
        return ctx.respond(throttle_time=0, groups=tuple(groups))
    error, topics = _group_topics(
        ctx,
        request.group_id,
        request.topics,
        "OffsetFetchResponsePartition",
        "OffsetFetchResponseTopic",
        bool(getattr(request, "require_stable", False)),
    )
    return ctx.respond(throttle_time=0, topics=topics, error_code=error)
