"""DescribeGroups (key 15, v0–5): state, protocol and members of groups.

Member metadata and assignments are given only for Stable groups (as Kafka does). A group this
broker does not know is described as ``Dead`` with no error (v0–5). A share group or a
KIP-848 consumer group is not a classic group: ``Dead``, and from v6 GROUP_ID_NOT_FOUND with
Kafka's message (ShareGroupDescribe / ConsumerGroupDescribe describe them).

Authorization: DESCRIBE on each group, else that group is GROUP_AUTHORIZATION_FAILED; KIP-430's
authorized operations (v3+) when asked for.
"""

from __future__ import annotations

from typing import Any

from strom.broker import authz, dispatch
from strom.broker.context import RequestContext
from strom.broker.group.model import GroupState
from strom.protocol.errors import ErrorCode, KafkaError

API_KEY = 15
AUTHORIZED_OPERATIONS_UNKNOWN = -(2**31)


def _describe(ctx: RequestContext, group_id: str, with_operations: bool = False) -> Any:
    base = {"group_id": group_id, "authorized_operations": AUTHORIZED_OPERATIONS_UNKNOWN}
    if not authz.authorize(ctx, authz.DESCRIBE, authz.GROUP, group_id):
        return ctx.make("DescribedGroup", error_code=ErrorCode.group_authorization_failed,
                        group_state="", protocol_type="", protocol_data="", members=(),
                        **base)  # fmt: skip
    if with_operations:  # KIP-430 (v3+)
        base["authorized_operations"] = authz.authorized_operations(ctx, authz.GROUP, group_id)
    try:
        group = ctx.groups.active().get_group(group_id)
    except KafkaError as exc:
        return ctx.make("DescribedGroup", error_code=exc.error_code, group_state="",
                        protocol_type="", protocol_data="", members=(), **base)  # fmt: skip
    if group is None:
        share = ctx.shares.groups.get(group_id) is not None and ctx.api_version >= 6
        return ctx.make("DescribedGroup",
                        error_code=ErrorCode.group_id_not_found if share else ErrorCode.none,
                        error_message=f"Group {group_id} is not a classic group." if share else None,
                        group_state="Dead", protocol_type="", protocol_data="", members=(),
                        **base)  # fmt: skip
    if group.consumer is not None:
        v6 = ctx.api_version >= 6
        return ctx.make("DescribedGroup",
                        error_code=ErrorCode.group_id_not_found if v6 else ErrorCode.none,
                        error_message=f"Group {group_id} is not a classic group." if v6 else None,
                        group_state="Dead", protocol_type="", protocol_data="", members=(),
                        **base)  # fmt: skip
    stable = group.state is GroupState.STABLE
    members = tuple(
        ctx.make(
            "DescribedGroupMember",
            member_id=m.member_id,
            group_instance_id=m.instance_id,
            client_id=m.client_id,
            client_host=m.client_host,
            member_metadata=m.metadata(group.protocol_name) if stable else b"",
            member_assignment=m.assignment if stable else b"",
        )
        for m in group.members.values()
    )
    return ctx.make(
        "DescribedGroup",
        error_code=ErrorCode.none,
        group_state=group.state.value,
        protocol_type=group.protocol_type or "",
        protocol_data=(group.protocol_name or "") if stable else "",
        members=members,
        **base,
    )


@dispatch.handler(API_KEY, 0, 6)
async def handle(ctx: RequestContext, request: Any) -> Any:
    with_operations = bool(getattr(request, "include_authorized_operations", False))
    return ctx.respond(throttle_time=0, groups=tuple(_describe(ctx, g, with_operations)
                                                     for g in request.groups))  # fmt: skip
