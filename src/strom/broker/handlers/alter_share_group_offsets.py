"""AlterShareGroupOffsets (key 91, v0): set share-partitions' start offsets (a reset).

Only while the share group has no members (NON_EMPTY_GROUP otherwise); a group that does not
exist is created. Each share-partition's state is re-initialized at the next state epoch with
the given start offset (InitializeShareGroupState), which drops its in-flight records and
fences writes made under the old epoch; the share-partitions cached at their leaders are
reloaded at next use. A start offset of -1 leaves the choice to ``share.auto.offset.reset`` at
first use. Unknown topics and partitions are UNKNOWN_TOPIC_OR_PARTITION.

Authorization: READ on the GROUP (else GROUP_AUTHORIZATION_FAILED) and READ on each topic (else
its partitions are TOPIC_AUTHORIZATION_FAILED, unchanged).
"""

from __future__ import annotations

from typing import Any

from strom.broker import authz, dispatch
from strom.broker.context import RequestContext
from strom.protocol.errors import ErrorCode

API_KEY = 91
E = ErrorCode


@dispatch.handler(API_KEY, 0, 0)
async def handle(ctx: RequestContext, request: Any) -> Any:
    shares = ctx.shares
    group_id = str(request.group_id)

    def top(code: ErrorCode, message: str | None = None) -> Any:
        ctx.metrics.request_error(API_KEY, code)
        return ctx.respond(throttle_time=0, error_code=code, error_message=message, responses=())

    if not group_id:
        return top(E.invalid_group_id, "The group id is empty.")
    if not authz.authorize(ctx, authz.READ, authz.GROUP, group_id):
        return top(E.group_authorization_failed, f"not authorized to READ group {group_id}")
    if (code := shares.not_here(group_id)) is not None:
        return top(code)
    group = shares.groups.get(group_id)
    if group is not None and group.members:
        return top(E.non_empty_group, f"Share group {group_id} has members: stop them first.")
    shares.ensure_group(group_id)
    responses = []
    for t in request.topics:
        name = str(t.topic_name)
        info = ctx.topics.get(name)
        parts = []
        done: list[int] = []
        readable = authz.authorize(ctx, authz.READ, authz.TOPIC, name)
        for p in t.partitions:
            index, start = int(p.partition_index), int(p.start_offset)
            code, message = E.none, None
            if not readable:
                code, message = E.topic_authorization_failed, f"not authorized to READ {name}"
            elif info is None or index not in info.replicas:
                code, message = E.unknown_topic_or_partition, f"{name}-{index} does not exist."
            elif start < -1:
                code, message = E.invalid_request, f"start offset {start} is not valid"
            else:
                key = (group_id, info.topic_id, index)
                summary = await shares.persister.summary(key, -1)
                code, message = summary.error, summary.message
                if code == E.none:
                    code, message = await shares.persister.initialize(key, summary.state_epoch + 1,
                                                                      start)  # fmt: skip
                if code == E.none:
                    done.append(index)
            if code:
                ctx.metrics.request_error(API_KEY, code)
            parts.append(ctx.make("AlterShareGroupOffsetsResponsePartition", partition_index=index,
                                  error_code=code, error_message=message))  # fmt: skip
        if info is not None and done:
            shares.groups.initialization_done(group_id, shares.topic_name, {info.topic_id: done}, {})
            shares.manager.drop_group(group_id, [info.topic_id])
        responses.append(ctx.make("AlterShareGroupOffsetsResponseTopic", topic_name=name,
                                  topic_id=info.topic_id if info else None,
                                  partitions=tuple(parts)))  # fmt: skip
    return ctx.respond(throttle_time=0, error_code=E.none, responses=tuple(responses))
