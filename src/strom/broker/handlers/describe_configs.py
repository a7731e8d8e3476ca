"""DescribeConfigs (key 32): topic and broker configs with value, source and synonyms.

TOPIC resources (type 2) list every topic config with its effective value and where it comes
from (DYNAMIC_TOPIC_CONFIG 1, DYNAMIC_BROKER_CONFIG 2, DYNAMIC_DEFAULT_BROKER_CONFIG 3,
STATIC_BROKER_CONFIG 4, DEFAULT_CONFIG 5); a BROKER resource named by this node's id lists every
broker config (read-only unless dynamic), ``""`` the cluster-wide dynamic defaults alone.
Synonyms are filled only when asked; v3+ carries each config's type (always) and its
documentation (when asked). An unknown topic is UNKNOWN_TOPIC_OR_PARTITION for that resource
alone; another broker's id is INVALID_REQUEST, as Kafka answers it. A GROUP resource (32)
lists the group configs (:mod:`strom.broker.group_configs`): the group's own (source
GROUP_CONFIG 8) or the broker's / Kafka's default.

Authorization: DESCRIBE_CONFIGS on the topic (else TOPIC_AUTHORIZATION_FAILED), the group
(GROUP_AUTHORIZATION_FAILED) or, for a broker or a broker logger, the CLUSTER
(CLUSTER_AUTHORIZATION_FAILED), per resource.
"""

from __future__ import annotations

from typing import Any

from strom.broker import authz, dispatch
from strom.broker import config_resources as cr
from strom.broker import dynamic_config as dc
from strom.broker.context import RequestContext
from strom.protocol.errors import ErrorCode, KafkaError, error_code_of

API_KEY = 32


async def _entries(ctx: RequestContext, rtype: int, name: str, keys: Any) -> list[cr.ConfigEntry]:
    if rtype == cr.GROUP:
        if not name:
            raise KafkaError(ErrorCode.invalid_request, "Group name must not be empty")
        return await cr.describe_group(ctx.configs, name, keys)
    if rtype == cr.TOPIC:
        info = ctx.topics.get(name)
        if info is None:
            raise KafkaError(
                ErrorCode.unknown_topic_or_partition, f"Topic '{name}' does not exist."
            )
        return cr.describe_topic(ctx.configs, info.configs, keys)
    if rtype == cr.BROKER:
        entity = dc.entity_of(name)
        if entity not in (dc.DEFAULT_ENTITY, str(ctx.node.node_id)):
            raise KafkaError(
                ErrorCode.invalid_request,
                f"Unexpected broker id, expected {ctx.node.node_id} or empty string, "
                f"but received {name}",
            )
        return cr.describe_broker(ctx.configs, entity, keys)
    raise KafkaError(ErrorCode.invalid_request, f"unsupported resource type {rtype}")


async def _result(ctx: RequestContext, resource: Any, synonyms: bool, docs: bool) -> Any:
    rtype = int(resource.resource_type)
    name = resource.resource_name
    keys = resource.configuration_keys
    try:
        authz.require_config(ctx, authz.DESCRIBE_CONFIGS, rtype, str(name))
        entries = await _entries(ctx, rtype, name, keys)
        code, message = ErrorCode.none, None
    except Exception as exc:
        entries, code, message = [], error_code_of(exc), str(exc)
    configs = tuple(
        ctx.make(
            "DescribeConfigsResourceResult",
            name=e.name,
            value=e.value,
            read_only=e.read_only,
            config_source=e.source,
            is_sensitive=e.sensitive,
            synonyms=tuple(
                ctx.make("DescribeConfigsSynonym", name=n, value=v, source=s)
                for n, v, s in (e.synonyms if synonyms else ())
            ),
            config_type=e.config_type,
            documentation=e.documentation if docs else None,
        )
        for e in entries
    )
    return ctx.make(
        "DescribeConfigsResult",
        error_code=code,
        error_message=message,
        resource_type=rtype,
        resource_name=name,
        configs=configs,
    )


@dispatch.handler(API_KEY, 1, 4)
async def handle(ctx: RequestContext, request: Any) -> Any:
    synonyms = bool(getattr(request, "include_synonyms", False))
    docs = bool(getattr(request, "include_documentation", False))
    return ctx.respond(
        throttle_time=0,
        results=tuple([await _result(ctx, r, synonyms, docs) for r in request.resources]),
    )
