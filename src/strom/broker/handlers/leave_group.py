"""LeaveGroup (key 13, v0–5): members leave (one before v3, a batch from v3, by member id or
group instance id); the group rebalances without them."""

from __future__ import annotations

from typing import Any

from strom.broker import authz, dispatch
from strom.broker.context import RequestContext
from strom.protocol.errors import KafkaError

API_KEY = 13


@dispatch.handler(API_KEY, 0, 5)
async def handle(ctx: RequestContext, request: Any) -> Any:
    authz.require(ctx, authz.READ, authz.GROUP, str(request.group_id))
    if ctx.api_version >= 3:
        leaving = [(m.member_id, m.group_instance_id) for m in request.members]
    else:
        leaving = [(request.member_id, None)]
    try:
        top, errors = ctx.groups.active().leave(request.group_id, leaving)
    except KafkaError as exc:
        top, errors = exc.error_code, [exc.error_code] * len(leaving)
    if ctx.api_version < 3:
        return ctx.respond(throttle_time=0, error_code=top or errors[0])
    return ctx.respond(
        throttle_time=0,
        error_code=top,
        members=tuple(
            ctx.make("MemberResponse", member_id=m, group_instance_id=i, error_code=code)
            for (m, i), code in zip(leaving, errors, strict=True)
        ),
    )
