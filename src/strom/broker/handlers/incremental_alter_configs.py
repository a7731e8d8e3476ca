"""IncrementalAlterConfigs (key 44): SET, DELETE, APPEND, SUBTRACT single topic configs.

APPEND and SUBTRACT apply to list configs only (``cleanup.policy``), starting from the
current effective value. The resulting override set is validated as a whole (INVALID_CONFIG
with the reason), then persisted and applied to the live logs unless ``validate_only``.
On a BROKER resource (a broker id, or ``""`` for the cluster-wide default) the ops change that
entity's dynamic config set (:mod:`strom.broker.dynamic_config`); on a GROUP resource the
group's configs (:mod:`strom.broker.group_configs`).

Authorization: ALTER_CONFIGS on the topic (else TOPIC_AUTHORIZATION_FAILED), the group
(GROUP_AUTHORIZATION_FAILED) or, for a broker or a broker logger, the CLUSTER
(CLUSTER_AUTHORIZATION_FAILED), per resource; nothing of a refused resource changes.
"""

from __future__ import annotations

from typing import Any

from strom.broker import config_resources as cr
from strom.broker import dispatch
from strom.broker.context import RequestContext

API_KEY = 44


async def _alter(ctx: RequestContext, resource: Any, validate_only: bool) -> None:
    target = cr.resource_to_alter(ctx, resource)
    ops = [(c.name, int(c.config_operation), c.value) for c in resource.configs]
    if isinstance(target, str):
        configs = await cr.incremental_broker(ctx.configs, target, ops)
        return await cr.alter_broker(ctx, target, configs, validate_only)
    if isinstance(target, cr.GroupTarget):
        group = await cr.incremental_group(ctx.configs, target.group_id, ops)
        return await cr.alter_group(ctx.configs, target.group_id, group, validate_only)
    overrides = cr.validate_overrides(ctx.configs, cr.incremental(ctx.configs, target.configs, ops))
    if not validate_only:
        await cr.apply_topic_overrides(ctx.topics.registry, ctx.logs, target.name, overrides)
    return None


@dispatch.handler(API_KEY, 0, 1)
async def handle(ctx: RequestContext, request: Any) -> Any:
    return await cr.alter_each_resource(ctx, request, _alter)
