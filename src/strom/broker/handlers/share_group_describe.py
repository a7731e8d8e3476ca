"""ShareGroupDescribe (key 77, v1): a share group's state, epochs, members and assignments.

A group id this coordinator does not serve is NOT_COORDINATOR (…); one that is no share group
here is GROUP_ID_NOT_FOUND, as Kafka answers.

Authorization: DESCRIBE on each group, else that group is GROUP_AUTHORIZATION_FAILED; KIP-430's
authorized operations when asked for.
"""

from __future__ import annotations

from typing import Any

from strom.broker import authz, dispatch
from strom.broker.context import RequestContext
from strom.protocol.errors import ErrorCode

API_KEY = 77
AUTHORIZED_OPERATIONS_UNKNOWN = -(2**31)
ASSIGNOR = "simple"  # Kafka's name of its share-group assignor (group.share.assignors)


def _describe(ctx: RequestContext, group_id: str, with_operations: bool = False) -> Any:
    shares = ctx.shares
    base = {"group_id": group_id, "authorized_operations": AUTHORIZED_OPERATIONS_UNKNOWN}
    if not authz.authorize(ctx, authz.DESCRIBE, authz.GROUP, group_id):
        return ctx.make("DescribedGroup", error_code=ErrorCode.group_authorization_failed,
                        group_state="", group_epoch=-1, assignment_epoch=-1, assignor_name="",
                        members=(), **base)  # fmt: skip
    if with_operations:  # KIP-430
        base["authorized_operations"] = authz.authorized_operations(ctx, authz.GROUP, group_id)
    code = shares.not_here(group_id) if group_id else ErrorCode.invalid_group_id
    group = shares.groups.get(group_id) if code is None else None
    if group is None:
        code = code or ErrorCode.group_id_not_found
        ctx.metrics.request_error(API_KEY, code)
        return ctx.make("DescribedGroup", error_code=code,
                        error_message=f"Group {group_id} not found." if code == ErrorCode.group_id_not_found else None,
                        group_state="Dead", group_epoch=-1, assignment_epoch=-1, assignor_name="",
                        members=(), **base)  # fmt: skip

    def assignment(parts: dict[Any, list[int]]) -> Any:
        return ctx.make("Assignment", topic_partitions=tuple(
            ctx.make("TopicPartitions", topic_id=tid, topic_name=shares.topic_name(tid) or "",
                     partitions=tuple(ps)) for tid, ps in sorted(parts.items())))  # fmt: skip

    members = tuple(
        ctx.make("Member", member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.epoch,
                 client_id=m.client_id, client_host=m.client_host,
                 subscribed_topic_names=m.subscribed, assignment=assignment(m.assignment))
        for m in group.members.values()
    )  # fmt: skip
    return ctx.make("DescribedGroup", error_code=ErrorCode.none, group_state=group.state,
                    group_epoch=group.epoch, assignment_epoch=group.assignment_epoch,
                    assignor_name=ASSIGNOR, members=members, **base)  # fmt: skip


@dispatch.handler(API_KEY, 1, 1)
async def handle(ctx: RequestContext, request: Any) -> Any:
    ops = bool(getattr(request, "include_authorized_operations", False))
    return ctx.respond(throttle_time=0,
                       groups=tuple(_describe(ctx, str(g), ops) for g in request.group_ids))  # fmt: skip
