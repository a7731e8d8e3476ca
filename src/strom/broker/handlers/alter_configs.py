"""AlterConfigs (key 33): replace a topic's whole override set.

Configs left out of the request go back to their broker or Kafka default, as in Kafka.
Every value is validated first (INVALID_CONFIG with the reason); with ``validate_only``
nothing changes. Changes are persisted in the registry and reach the live logs at once.
A BROKER resource (a broker id, or ``""`` for the cluster-wide default) gets the given configs
as its whole dynamic set (:mod:`strom.broker.dynamic_config`), with Kafka's errors; a GROUP
resource its whole group config set (:mod:`strom.broker.group_configs`).

Authorization: ALTER_CONFIGS on the topic (else TOPIC_AUTHORIZATION_FAILED), the group
(GROUP_AUTHORIZATION_FAILED) or, for a broker or a broker logger, the CLUSTER
(CLUSTER_AUTHORIZATION_FAILED), per resource; nothing of a refused resource changes.
"""

from __future__ import annotations

from typing import Any

from strom.broker import config_resources as cr
from strom.broker import dispatch
from strom.broker.context import RequestContext
from strom.protocol.errors import ErrorCode, KafkaError

API_KEY = 33


async def _alter(ctx: RequestContext, resource: Any, validate_only: bool) -> None:
    target = cr.resource_to_alter(ctx, resource)
    wanted: dict[str, str | None] = {}
    for config in resource.configs:
        if config.name in wanted:
            raise KafkaError(
                ErrorCode.invalid_request, f"Error due to duplicate config keys: {config.name}"
            )
        wanted[config.name] = config.value
    if isinstance(target, cr.GroupTarget):  # the group's whole set (group_configs)
        return await cr.alter_group(ctx.configs, target.group_id, wanted, validate_only)
    if isinstance(target, str):  # a broker entity; a null value leaves the config unset
        configs = {k: v for k, v in wanted.items() if v is not None}
        return await cr.alter_broker(ctx, target, configs, validate_only)
    overrides = cr.validate_overrides(ctx.configs, wanted)
    if not validate_only:
        await cr.apply_topic_overrides(ctx.topics.registry, ctx.logs, target.name, overrides)
    return None


@dispatch.handler(API_KEY, 0, 2)
async def handle(ctx: RequestContext, request: Any) -> Any:
    return await cr.alter_each_resource(ctx, request, _alter)
