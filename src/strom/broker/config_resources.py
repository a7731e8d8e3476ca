"""Config resources as the admin APIs see them: describe, validate and alter topic configs.

Shared by DescribeConfigs, AlterConfigs, IncrementalAlterConfigs and CreateTopics so the
precedence rules live in one place (``strom.storage.log_config``): a topic override is
DYNAMIC_TOPIC_CONFIG, a broker property the user set is STATIC_BROKER_CONFIG, anything else
DEFAULT_CONFIG. Broker resources are read-only here: strom has no dynamic broker configs.

Changing a topic's overrides writes them to the registry (so they survive a restart) and
hands them to the live logs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from strom.config import BROKER_DEFAULTS
from strom.protocol.errors import ErrorCode, KafkaError, error_code_of
from strom.storage.errors import InvalidConfigError
from strom.storage.log_config import (
    DEFAULT_CONFIG,
    DYNAMIC_TOPIC_CONFIG,
    STATIC_BROKER_CONFIG,
    TOPIC_CONFIGS,
    LogConfig,
    effective_configs,
    validate_topic_config,
)

if TYPE_CHECKING:
    from strom.broker.broker import Broker
    from strom.broker.context import RequestContext
    from strom.metadata.topics import TopicInfo

# ConfigResource.Type
UNKNOWN_RESOURCE, TOPIC, BROKER, BROKER_LOGGER = 0, 2, 4, 8

# ConfigEntry.ConfigSource codes on the wire
SOURCE_CODES = {
    DYNAMIC_TOPIC_CONFIG: 1,
    "DYNAMIC_BROKER_CONFIG": 2,
    "DYNAMIC_DEFAULT_BROKER_CONFIG": 3,
    STATIC_BROKER_CONFIG: 4,
    DEFAULT_CONFIG: 5,
}

# DescribeConfigs v3+ config_type codes
CONFIG_TYPES = {"boolean": 1, "string": 2, "int": 3, "short": 4, "long": 5, "double": 6, "list": 7}

# IncrementalAlterConfigs operations
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


@dataclass(slots=True)
class ConfigEntry:
    name: str
    value: str | None
    source: int
    read_only: bool = False
    sensitive: bool = False
    config_type: int = 0
    documentation: str | None = None
    synonyms: list[tuple[str, str | None, int]] = field(default_factory=list)


def _topic_synonyms(
    name: str, overrides: Mapping[str, str], explicit: Mapping[str, str]
) -> list[tuple[str, str | None, int]]:
    """Kafka's order: the topic override, the broker property set, the default."""
    spec = TOPIC_CONFIGS[name]
    out: list[tuple[str, str | None, int]] = []
    if name in overrides:
        out.append((name, overrides[name], SOURCE_CODES[DYNAMIC_TOPIC_CONFIG]))
    broker_name = spec.broker_property
    if broker_name is not None and broker_name in explicit:
        out.append((broker_name, explicit[broker_name], SOURCE_CODES[STATIC_BROKER_CONFIG]))
    out.append((broker_name or name, spec.default, SOURCE_CODES[DEFAULT_CONFIG]))
    return out


def describe_topic(
    broker: Broker, overrides: Mapping[str, str], keys: Iterable[str] | None = None
) -> list[ConfigEntry]:
    """Every topic config (or those in ``keys``) with its effective value and source."""
    explicit = broker.config.explicit
    values = effective_configs(overrides, broker.config.values)
    sources = effective_configs(overrides, explicit)
    wanted = set(keys) if keys is not None else None
    entries = []
    for name, (value, _) in sorted(values.items()):
        if wanted is not None and name not in wanted:
            continue
        spec = TOPIC_CONFIGS[name]
        entries.append(
            ConfigEntry(
                name=name,
                value=value,
                source=SOURCE_CODES[sources[name][1]],
                config_type=CONFIG_TYPES.get(spec.type, 0),
                documentation=spec.doc,
                synonyms=_topic_synonyms(name, overrides, explicit),
            )
        )
    return entries


def _is_sensitive(name: str) -> bool:
    return "password" in name or name.endswith((".secret", ".key"))


def describe_broker(broker: Broker, keys: Iterable[str] | None = None) -> list[ConfigEntry]:
    """The broker's static properties: those set (STATIC_BROKER_CONFIG) and defaults."""
    explicit = broker.config.explicit
    props: dict[str, str] = {}
    for spec in TOPIC_CONFIGS.values():
        if spec.broker_property is not None:
            props[spec.broker_property] = spec.default
    props.update(BROKER_DEFAULTS)
    props.update(broker.config.values)
    wanted = set(keys) if keys is not None else None
    entries = []
    for name, value in sorted(props.items()):
        if wanted is not None and name not in wanted:
            continue
        source = STATIC_BROKER_CONFIG if name in explicit else DEFAULT_CONFIG
        sensitive = _is_sensitive(name)
        code = SOURCE_CODES[source]
        entries.append(
            ConfigEntry(
                name=name,
                value=None if sensitive else value,
                source=code,
                read_only=True,
                sensitive=sensitive,
                config_type=_guess_type(value),
                synonyms=[(name, None if sensitive else value, code)],
            )
        )
    return entries


def _guess_type(value: str) -> int:
    if value in ("true", "false"):
        return CONFIG_TYPES["boolean"]
    if value.lstrip("-").isdigit():
        return CONFIG_TYPES["long"]
    return CONFIG_TYPES["string"]


def validate_overrides(broker: Broker, overrides: Mapping[str, str | None]) -> dict[str, str]:
    """Check every override and the resulting configuration; raise InvalidConfigError."""
    checked: dict[str, str] = {}
    for name, value in overrides.items():
        if value is None:
            raise InvalidConfigError(f"Null value not supported for topic configs: {name}")
        validate_topic_config(name, value)
        checked[name] = value
    LogConfig.from_configs(checked, broker.config.values)
    return checked


def apply_topic_overrides(broker: Broker, topic: str, overrides: Mapping[str, str]) -> None:
    """Persist ``overrides`` as the topic's whole override set and reconfigure its logs."""
    broker.topics.set_configs(topic, dict(overrides))
    broker.logs.update_topic_config(topic, dict(overrides))


def incremental(
    broker: Broker, current: Mapping[str, str], ops: Iterable[tuple[str, int, str | None]]
) -> dict[str, str]:
    """The override set after IncrementalAlterConfigs' SET/DELETE/APPEND/SUBTRACT ops."""
    result = dict(current)
    seen: set[str] = set()
    for name, op, value in ops:
        if name in seen:
            raise KafkaError(
                ErrorCode.invalid_request, f"Error due to duplicate config keys: {name}"
            )
        seen.add(name)
        spec = TOPIC_CONFIGS.get(name)
        if spec is None:
            raise InvalidConfigError(f"Unknown topic config name: {name}")
        if op == SET:
            if value is None:
                raise InvalidConfigError(f"Null value not supported for topic configs: {name}")
            result[name] = value
        elif op == DELETE:
            result.pop(name, None)
        elif op in (APPEND, SUBTRACT):
            if spec.type != "list":
                verb = "append" if op == APPEND else "subtract"
                raise InvalidConfigError(
                    f"Config value {verb} is not allowed for config key: {name}"
                )
            base = result.get(name)
            if base is None:
                base = effective_configs({}, broker.config.values)[name][0]
            items = [i.strip() for i in base.split(",") if i.strip()]
            given = [i.strip() for i in (value or "").split(",") if i.strip()]
            if op == APPEND:
                items += [i for i in given if i not in items]
            else:
                items = [i for i in items if i not in given]
            result[name] = ",".join(items)
        else:
            raise KafkaError(ErrorCode.invalid_request, f"unknown config operation {op} for {name}")
    return result


def alter_each_resource(
    ctx: RequestContext, request: Any, alter: Callable[[RequestContext, Any, bool], None]
) -> Any:
    """The AlterConfigs / IncrementalAlterConfigs response: ``alter`` runs per resource, and
    whatever it raises becomes that resource's error code and message."""
    responses = []
    for resource in request.resources:
        try:
            alter(ctx, resource, bool(request.validate_only))
            code, message = ErrorCode.none, None
        except Exception as exc:
            code, message = error_code_of(exc), str(exc)
        responses.append(
            ctx.make(
                "AlterConfigsResourceResponse",
                error_code=code,
                error_message=message,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
            )
        )
    return ctx.respond(throttle_time=0, responses=tuple(responses))


def topic_to_alter(ctx: RequestContext, resource: Any) -> TopicInfo:
    """The topic an AlterConfigs-style resource names; broker resources are refused (strom's
    broker properties are static) and so are unknown types and topics."""
    rtype = int(resource.resource_type)
    name = resource.resource_name
    if rtype == BROKER:
        raise KafkaError(
            ErrorCode.invalid_request, "broker configs are static in strom and cannot be altered"
        )
    if rtype != TOPIC:
        raise KafkaError(ErrorCode.invalid_request, f"unsupported resource type {rtype}")
    info = ctx.broker.topics.get(name)
    if info is None:
        raise KafkaError(ErrorCode.unknown_topic_or_partition, f"Topic '{name}' does not exist.")
    return info
