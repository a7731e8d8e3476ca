"""DescribeShareGroupOffsets (key 90, v0–1): share groups' start offsets (SPSO) and lag.

Answered by the groups' coordinator, which asks the share coordinator
(ReadShareGroupStateSummary) for each share-partition: the start offset, the leader epoch of
its last writer and, v1 (KIP-1226), the lag — the records from the start offset to the
partition's high watermark (its leader's: ListOffsets when that is another broker) not yet
acknowledged or archived (-1 when the high watermark cannot be had now). ``topics`` null means every share-partition
with initialized state; a named partition without state has start offset -1. A group that is
not a share group here is GROUP_ID_NOT_FOUND.

Authorization: DESCRIBE on each group (else GROUP_AUTHORIZATION_FAILED) and on each topic (a named
one's partitions TOPIC_AUTHORIZATION_FAILED, an unnamed one left out).
"""

from __future__ import annotations

from typing import Any

from strom.broker import authz, dispatch
from strom.broker.context import RequestContext
from strom.protocol.errors import ErrorCode

API_KEY = 90
E = ErrorCode


async def _partition(ctx: RequestContext, group: str, name: str, topic_id: Any, index: int,
                     initialized: bool) -> Any:  # fmt: skip
    start, epoch, lag, code, message = -1, -1, -1, E.none, None
    if initialized:
        r = await ctx.shares.persister.summary((group, topic_id, index), -1)
        code, message = r.error, r.message
        start, epoch = r.start_offset, r.leader_epoch
        hw = await ctx.shares.high_watermark(name, index) if code == E.none and start >= 0 else None
        if hw is not None:
            lag = max(hw - start - max(r.delivery_complete_count, 0), 0)
    if code:
        ctx.metrics.request_error(API_KEY, code)
    return ctx.make("DescribeShareGroupOffsetsResponsePartition", partition_index=index,
                    start_offset=start, leader_epoch=epoch, lag=lag, error_code=code,
                    error_message=message)  # fmt: skip


async def _group(ctx: RequestContext, request_group: Any) -> Any:
    group_id = str(request_group.group_id)
    shares = ctx.shares

    def failed(code: ErrorCode, message: str | None = None) -> Any:
        ctx.metrics.request_error(API_KEY, code)
        return ctx.make("DescribeShareGroupOffsetsResponseGroup", group_id=group_id, topics=(),
                        error_code=code, error_message=message)  # fmt: skip

    if not authz.authorize(ctx, authz.DESCRIBE, authz.GROUP, group_id):
        return failed(E.group_authorization_failed)
    if (code := shares.not_here(group_id)) is not None:
        return failed(code)
    group = shares.groups.get(group_id)
    if group is None:
        return failed(E.group_id_not_found, f"Group {group_id} is not a share group.")
    wanted: list[tuple[str, Any, list[int] | None]] = []
    if request_group.topics is None:
        for tid, (name, initialized) in sorted(group.initialized.items(), key=lambda kv: kv[1][0]):
            wanted.append((shares.topic_name(tid) or name, tid, sorted(initialized)))
    else:
        for t in request_group.topics:
            info = ctx.topics.get(str(t.topic_name))
            wanted.append((str(t.topic_name), info.topic_id if info else None,
                           [int(p) for p in t.partitions]))  # fmt: skip
    topics = []
    for name, tid, parts in wanted:
        if not authz.authorize(ctx, authz.DESCRIBE, authz.TOPIC, name):
            if request_group.topics is None:
                continue  # all of the group's topics asked: left out
            partitions = tuple(ctx.make(
                "DescribeShareGroupOffsetsResponsePartition", partition_index=p, start_offset=-1,
                leader_epoch=-1, lag=-1, error_code=E.topic_authorization_failed,
                error_message=None) for p in parts or ())  # fmt: skip
            topics.append(ctx.make("DescribeShareGroupOffsetsResponseTopic", topic_name=name,
                                   topic_id=None, partitions=partitions))  # fmt: skip
            continue
        if tid is None:
            partitions = tuple(ctx.make(
                "DescribeShareGroupOffsetsResponsePartition", partition_index=p, start_offset=-1,
                leader_epoch=-1, lag=-1, error_code=E.unknown_topic_or_partition,
                error_message=f"Topic {name} does not exist.") for p in parts or ())  # fmt: skip
            topics.append(ctx.make("DescribeShareGroupOffsetsResponseTopic", topic_name=name,
                                   topic_id=None, partitions=partitions))  # fmt: skip
            continue
        have = group.initialized.get(tid, ("", frozenset()))[1]
        indexes = parts if parts is not None else sorted(have)
        partitions = tuple([await _partition(ctx, group_id, name, tid, p, p in have)
                            for p in indexes])  # fmt: skip
        topics.append(ctx.make("DescribeShareGroupOffsetsResponseTopic", topic_name=name,
                               topic_id=tid, partitions=partitions))  # fmt: skip
    return ctx.make("DescribeShareGroupOffsetsResponseGroup", group_id=group_id,
                    topics=tuple(topics), error_code=E.none)  # fmt: skip


@dispatch.handler(API_KEY, 0, 1)
async def handle(ctx: RequestContext, request: Any) -> Any:
    return ctx.respond(throttle_time=0,
                       groups=tuple([await _group(ctx, g) for g in request.groups]))  # fmt: skip
