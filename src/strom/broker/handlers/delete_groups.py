"""DeleteGroups (key 42, v0–2): delete Empty groups and their offsets (tombstones)."""

from __future__ import annotations

from typing import Any

from strom.broker import dispatch
from strom.broker.context import RequestContext
from strom.protocol.errors import KafkaError

API_KEY = 42


@dispatch.handler(API_KEY, 0, 2)
async def handle(ctx: RequestContext, request: Any) -> Any:
    names = list(request.groups_names)
    try:
        codes = ctx.groups.active().delete_groups(names)
    except KafkaError as exc:
        codes = dict.fromkeys(names, exc.error_code)
    return ctx.respond(
        throttle_time=0,
        results=tuple(
            ctx.make("DeletableGroupResult", group_id=name, error_code=codes[name])
            for name in names
        ),
    )
