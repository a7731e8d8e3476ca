"""DeleteGroups (key 42, v0–2): delete Empty groups and their offsets (tombstones).

A share group (no members left, else NON_EMPTY_GROUP) is deleted with its share-partitions'
state in ``__share_group_state`` (:meth:`strom.broker.share.service.ShareService.delete_group`).

Authorization: DELETE on each group, else that group is GROUP_AUTHORIZATION_FAILED and left alone.
"""

from __future__ import annotations

from typing import Any

from strom.broker import authz, dispatch
from strom.broker.context import RequestContext
from strom.protocol.errors import ErrorCode, KafkaError

API_KEY = 42


@dispatch.handler(API_KEY, 0, 2)
async def handle(ctx: RequestContext, request: Any) -> Any:
    names = list(request.groups_names)
    allowed = authz.allowed_names(ctx, authz.DELETE, authz.GROUP, names)
    shares = [n for n in allowed if ctx.shares.groups.get(n) is not None]
    classic = [n for n in allowed if n not in shares]
    try:
        codes = ctx.groups.active().delete_groups(classic) if classic else {}
    except KafkaError as exc:
        codes = dict.fromkeys(classic, exc.error_code)
    for name in shares:
        codes[name] = await ctx.shares.delete_group(name)
    for name in names:
        if name not in allowed:
            codes[name] = ErrorCode.group_authorization_failed
    return ctx.respond(
        throttle_time=0,
        results=tuple(
            ctx.make("DeletableGroupResult", group_id=name, error_code=codes[name])
            for name in names
        ),
    )
