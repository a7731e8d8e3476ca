"""IncrementalAlterConfigs (key 44): SET, DELETE, APPEND, SUBTRACT single topic configs.

APPEND and SUBTRACT apply to list configs only (``cleanup.policy``), starting from the
current effective value. The resulting override set is validated as a whole (INVALID_CONFIG
with the reason), then persisted and applied to the live logs unless ``validate_only``.
"""

from __future__ import annotations

from typing import Any

from strom.broker import config_resources as cr
from strom.broker import dispatch
from strom.broker.context import RequestContext

API_KEY = 44


def _alter(ctx: RequestContext, resource: Any, validate_only: bool) -> None:
    info = cr.topic_to_alter(ctx, resource)
    name = info.name
    ops = [(c.name, int(c.config_operation), c.value) for c in resource.configs]
    overrides = cr.validate_overrides(ctx.broker, cr.incremental(ctx.broker, info.configs, ops))
    if not validate_only:
        cr.apply_topic_overrides(ctx.broker, name, overrides)


@dispatch.handler(API_KEY, 0, 1)
async def handle(ctx: RequestContext, request: Any) -> Any:
    return cr.alter_each_resource(ctx, request, _alter)
