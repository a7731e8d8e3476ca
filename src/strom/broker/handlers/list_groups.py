"""ListGroups (key 16, v0–5): every group this coordinator knows, with its state (v4+), filtered
by state (v4+, case-insensitive) and type (v5+: ``classic``; ``consumer`` for a KIP-848
group, whose protocol type is ``consumer`` and state Empty, Assigning, Reconciling or Stable;
``share`` for share groups, whose protocol type is ``share``; as Kafka lists them).

Authorization: DESCRIBE on the CLUSTER lists every group; otherwise only the groups the principal
may DESCRIBE are listed.
"""

from __future__ import annotations

from typing import Any

from strom.broker import authz, dispatch
from strom.broker.context import RequestContext
from strom.protocol.errors import ErrorCode, KafkaError

API_KEY = 16


@dispatch.handler(API_KEY, 0, 5)
async def handle(ctx: RequestContext, request: Any) -> Any:
    try:
        coord = ctx.groups.active()
        if coord.loading:
            raise KafkaError(ErrorCode.coordinator_load_in_progress)
    except KafkaError as exc:
        return ctx.respond(throttle_time=0, error_code=exc.error_code, groups=())
    # Kafka: CLUSTER DESCRIBE lists every group, else only the groups the principal may DESCRIBE
    everything = authz.authorize_cluster(ctx, authz.DESCRIBE)

    def visible(group_id: str) -> bool:
        return everything or authz.authorize(ctx, authz.DESCRIBE, authz.GROUP, group_id)

    states = {s.lower() for s in getattr(request, "states_filter", ()) or ()}
    types = {t.lower() for t in getattr(request, "types_filter", ()) or ()}
    groups = []
    for group in list(coord.groups.values()):
        if states and group.state_name.lower() not in states:
            continue
        if types and group.group_type not in types:
            continue
        if not visible(group.group_id):
            continue
        groups.append(
            ctx.make(
                "ListedGroup",
                group_id=group.group_id,
                protocol_type=(group.protocol_type or "") if group.consumer is None else "consumer",
                group_state=group.state_name,
                group_type=group.group_type,
            )
        )
    if not types or "share" in types:
        for share in list(ctx.shares.groups.groups.values()):
            if coord.not_here(share.group_id) is not None:
                continue
            if states and share.state.lower() not in states:
                continue
            if not visible(share.group_id):
                continue
            groups.append(ctx.make("ListedGroup", group_id=share.group_id, protocol_type="share",
                                   group_state=share.state, group_type="share"))  # fmt: skip
    return ctx.respond(throttle_time=0, error_code=ErrorCode.none, groups=tuple(groups))
