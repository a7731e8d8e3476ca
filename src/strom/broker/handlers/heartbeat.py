"""Heartbeat (key 12, v0–4): keeps a member's session; REBALANCE_IN_PROGRESS asks it to rejoin."""

from __future__ import annotations

from typing import Any

from strom.broker import dispatch
from strom.broker.context import RequestContext
from strom.broker.group.service import coordinator_of
from strom.protocol.errors import KafkaError

API_KEY = 12


@dispatch.handler(API_KEY, 0, 4)
async def handle(ctx: RequestContext, request: Any) -> Any:
    try:
        code = coordinator_of(ctx.broker).heartbeat(
            request.group_id,
            request.member_id,
            getattr(request, "group_instance_id", None),
            int(request.generation_id),
        )
    except KafkaError as exc:
        code = exc.error_code
    return ctx.respond(throttle_time=0, error_code=code)
