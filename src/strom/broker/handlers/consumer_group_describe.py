"""ConsumerGroupDescribe (key 69, v0–1): KIP-848 groups as their coordinator has them.

Per group: its state (Empty, Assigning, Reconciling, Stable), group and assignment epochs, the
assignor its next target would use, and each member's subscription, current and target
assignments (topic ids and names) and, from v1, its type (0 classic, 1 consumer). A group that
is not a consumer group (classic, or none at all) answers GROUP_ID_NOT_FOUND, as Kafka does:
clients then describe it with DescribeGroups.

Authorization: DESCRIBE on each group, else that group is GROUP_AUTHORIZATION_FAILED; KIP-430's
authorized operations when asked for.
"""

from __future__ import annotations

from typing import Any

from strom.broker import authz, dispatch
from strom.broker.context import RequestContext
from strom.broker.group.consumer_records import TopicPartitions
from strom.protocol.errors import ErrorCode, KafkaError

API_KEY = 69
AUTHORIZED_OPERATIONS_UNKNOWN = -(2**31)


def _assignment(ctx: RequestContext, parts: TopicPartitions) -> Any:
    coord = ctx.groups.active()
    topics = []
    for tid, ps in sorted(parts.items()):
        name = coord.consumer.topic_name(tid)
        if name is not None and ps:
            topics.append(ctx.make("TopicPartitions", topic_id=tid, topic_name=name,
                                   partitions=tuple(sorted(ps))))  # fmt: skip
    return ctx.make("Assignment", topic_partitions=tuple(topics))


def _describe(ctx: RequestContext, group_id: str, with_operations: bool = False) -> Any:
    base = {"group_id": group_id, "authorized_operations": AUTHORIZED_OPERATIONS_UNKNOWN}
    if not authz.authorize(ctx, authz.DESCRIBE, authz.GROUP, group_id):
        return ctx.make("DescribedGroup", error_code=ErrorCode.group_authorization_failed,
                        group_state="", group_epoch=-1, assignment_epoch=-1, assignor_name="",
                        members=(), **base)  # fmt: skip
    if with_operations:  # KIP-430
        base["authorized_operations"] = authz.authorized_operations(ctx, authz.GROUP, group_id)
    empty = {"group_state": "", "group_epoch": -1, "assignment_epoch": -1, "assignor_name": "",
             "members": ()}  # fmt: skip
    try:
        entry = ctx.groups.active().get_group(group_id)
    except KafkaError as exc:
        return ctx.make("DescribedGroup", error_code=exc.error_code, **empty, **base)
    if entry is None or entry.consumer is None:
        message = (f"Group {group_id} not found." if entry is None
                   else f"Group {group_id} is not a consumer group.")  # fmt: skip
        return ctx.make("DescribedGroup", error_code=ErrorCode.group_id_not_found,
                        error_message=message, **empty, **base)  # fmt: skip
    group = entry.consumer
    coord = ctx.groups.active()
    members = tuple(
        ctx.make(
            "Member", member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id,
            member_epoch=m.member_epoch, client_id=m.client_id, client_host=m.client_host,
            subscribed_topic_names=tuple(m.subscribed_topic_names),
            subscribed_topic_regex=m.subscribed_topic_regex,
            assignment=_assignment(ctx, m.assigned),
            target_assignment=_assignment(ctx, group.target.get(m.member_id, {})),
            member_type=0 if m.uses_classic else 1,
        )  # fmt: skip
        for m in group.members.values()
    )
    return ctx.make(
        "DescribedGroup", error_code=ErrorCode.none, group_state=group.state.value,
        group_epoch=group.group_epoch, assignment_epoch=group.assignment_epoch,
        assignor_name=group.preferred_assignor(coord.consumer.default_assignor()),
        members=members, **base,
    )  # fmt: skip


@dispatch.handler(API_KEY, 0, 1)
async def handle(ctx: RequestContext, request: Any) -> Any:
    ops = bool(getattr(request, "include_authorized_operations", False))
    return ctx.respond(throttle_time=0,
                       groups=tuple(_describe(ctx, g, ops) for g in request.group_ids))  # fmt: skip
