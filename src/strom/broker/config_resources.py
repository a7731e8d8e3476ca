"""Config resources as the admin APIs see them: describe, validate and alter topic configs.

Shared by DescribeConfigs, AlterConfigs, IncrementalAlterConfigs and CreateTopics so the
precedence rules live in one place: a topic override is DYNAMIC_TOPIC_CONFIG; then the broker
property behind it, from this broker's dynamic config (DYNAMIC_BROKER_CONFIG), the cluster-wide
dynamic default (DYNAMIC_DEFAULT_BROKER_CONFIG), the static config (STATIC_BROKER_CONFIG) or
Kafka's default (DEFAULT_CONFIG), synonyms listed in that order as Kafka's ``ConfigHelper`` does.
Broker resources are described from :mod:`strom.broker.broker_config_defs` and altered through
:mod:`strom.broker.dynamic_config` (dynamic configs only; the rest is read-only).

Changing a topic's overrides writes them to the registry (so they survive a restart) and
hands them to the live logs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from strom import kafka_configs as kc
from strom.broker import authz
from strom.broker import broker_config_defs as defs
from strom.broker import dynamic_config as dc
from strom.broker import group_configs as gc
from strom.broker.dynamic_config import DynamicConfig
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
    from strom.broker.context import RequestContext
    from strom.metadata.topics import TopicInfo, TopicRegistry
    from strom.storage.log_manager import LogManager

#: Kafka's topic configs strom accepts, stores and describes (internal ones only when asked
#: for by name) but does not act on (remote storage, per-codec compression levels,
#: replication throttles: docs/configs.md)
KAFKA_ONLY_TOPIC_CONFIGS = {n: k for n, k in kc.TOPIC.items() if n not in TOPIC_CONFIGS}

# ConfigResource.Type
UNKNOWN_RESOURCE, TOPIC, BROKER, BROKER_LOGGER, GROUP = 0, 2, 4, 8, 32


@dataclass(frozen=True, slots=True)
class GroupTarget:
    """A GROUP config resource (:mod:`strom.broker.group_configs`)."""

    group_id: str

# ConfigEntry.ConfigSource codes on the wire
SOURCE_CODES = {
    DYNAMIC_TOPIC_CONFIG: 1,
    "DYNAMIC_BROKER_CONFIG": 2,
    "DYNAMIC_DEFAULT_BROKER_CONFIG": 3,
    STATIC_BROKER_CONFIG: 4,
    DEFAULT_CONFIG: 5,
}

# DescribeConfigs v3+ config_type codes
CONFIG_TYPES = defs.TYPE_IDS

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


def _from_primary(primary: str, synonyms: list[tuple[str, str | None, int]]
                  ) -> list[tuple[str, str | None, int]]:  # fmt: skip
    """A topic config's broker synonyms from the first entry of its primary one (``primary``)
    on: Kafka's ``ConfigHelper.configSynonyms`` drops the leading entries of other names, so
    with ``log.retention.ms`` set nowhere ``retention.ms`` lists no broker synonym at all, not
    ``log.retention.hours``' default (kafka-configs --describe prints the list)."""
    while synonyms and synonyms[0][0] != primary:
        synonyms = synonyms[1:]
    return synonyms


def describe_topic(
    configs: DynamicConfig, overrides: Mapping[str, str], keys: Iterable[str] | None = None
) -> list[ConfigEntry]:
    """Every topic config (or those in ``keys``) with its effective value, source, synonyms:
    strom's own (:data:`TOPIC_CONFIGS`) and the rest of Kafka's catalogue, accepted and kept
    but without effect in strom (:data:`KAFKA_ONLY_TOPIC_CONFIGS`)."""
    values = effective_configs(overrides, configs.config.values)
    wanted = set(keys) if keys is not None else None
    entries = []
    for name in sorted(set(values) | set(KAFKA_ONLY_TOPIC_CONFIGS)):
        if wanted is not None and name not in wanted:
            continue
        if wanted is None and name not in values and KAFKA_ONLY_TOPIC_CONFIGS[name].internal:
            continue
        synonyms: list[tuple[str, str | None, int]] = []
        if name in overrides:
            synonyms.append((name, overrides[name], SOURCE_CODES[DYNAMIC_TOPIC_CONFIG]))
        value: str | None
        if name in values:
            spec = TOPIC_CONFIGS[name]
            value, ctype, doc = values[name][0], spec.type, spec.doc
            if spec.broker_property is not None:
                names = defs.synonyms(spec.broker_property)
                synonyms += _from_primary(names[0], configs.broker_synonyms(
                    names, sensitive=False))  # fmt: skip
        else:
            kafka = KAFKA_ONLY_TOPIC_CONFIGS[name]
            ctype, doc = kafka.type, kafka.doc
            if kafka.broker_synonyms:
                synonyms += _from_primary(kafka.broker_synonyms[0], configs.broker_synonyms(
                    kafka.broker_synonyms, sensitive=False))  # fmt: skip
            value = synonyms[0][1] if synonyms else kafka.default
        entries.append(
            ConfigEntry(
                name=name,
                value=value,
                source=synonyms[0][2] if synonyms else SOURCE_CODES[DEFAULT_CONFIG],
                config_type=CONFIG_TYPES.get(ctype, 0),
                documentation=doc,
                synonyms=synonyms,
            )
        )
    return entries


def _computed_broker_values(configs: DynamicConfig) -> dict[str, str]:
    """Static settings that come from the command line rather than properties."""
    node = configs.node
    host, port = node.listen
    adv_host, adv_port = node.advertised
    listeners = node.listeners
    return {
        "broker.id": str(node.node_id),
        "node.id": str(node.node_id),
        "listeners": ",".join(s.url() for s in listeners.bound) if listeners
        else f"PLAINTEXT://{host}:{port}",
        "advertised.listeners": ",".join(s.url() for s in listeners.advertised) if listeners
        else f"PLAINTEXT://{adv_host}:{adv_port}",
        "log.dirs": ",".join(str(d) for d in node.log_dirs),
    }


def describe_broker(
    configs: DynamicConfig, entity: str, keys: Iterable[str] | None = None
) -> list[ConfigEntry]:
    """A BROKER resource: this broker's every config (``entity`` its id) with value, source
    and synonyms; or (``entity`` the default) the cluster-wide dynamic configs alone."""
    cfg = configs.config
    per_broker = entity != dc.DEFAULT_ENTITY
    if per_broker:
        computed = _computed_broker_values(configs)
        names = set(defs.DESCRIBED) | set(cfg.explicit) | set(cfg.dynamic_broker)
    else:
        computed = {}
        names = set(cfg.dynamic_default)
    wanted = set(keys) if keys is not None else None
    entries = []
    for name in sorted(names):
        if wanted is not None and name not in wanted:
            continue
        sensitive = defs.is_sensitive(name)
        synonyms = configs.broker_synonyms(defs.synonyms(name), sensitive)
        if not per_broker:
            synonyms = [s for s in synonyms if s[2] == dc.DYNAMIC_DEFAULT]
        while synonyms and synonyms[0][0] != name:  # Kafka drops other names' leading entries
            synonyms.pop(0)
        if per_broker and name in computed and name not in cfg.explicit:
            value: str | None = computed[name]
            synonyms.insert(0, (name, value, dc.STATIC))
        elif synonyms:  # the layer that sets it (a higher layer may hide it in ``values``)
            value = synonyms[0][1]
        elif per_broker:
            spec = defs.BROKER_CONFIGS.get(name)
            value = cfg.values.get(name, spec.default if spec else None)
        else:
            value = cfg.dynamic_default.get(name)
        spec = defs.BROKER_CONFIGS.get(name)
        entries.append(
            ConfigEntry(
                name=name,
                value=None if sensitive else value,
                source=synonyms[0][2] if synonyms else SOURCE_CODES[DEFAULT_CONFIG],
                read_only=defs.base_name(name) not in defs.DYNAMIC_CONFIGS,
                sensitive=sensitive,
                config_type=defs.type_id(name),
                documentation=spec.doc if spec is not None and spec.doc else None,
                synonyms=synonyms,
            )
        )
    return entries


def validate_overrides(configs: DynamicConfig, overrides: Mapping[str, str | None]
                       ) -> dict[str, str]:  # fmt: skip
    """Check every override and the resulting configuration; raise InvalidConfigError
    (INVALID_CONFIG, Kafka's answer): a name in neither strom's topic configs nor Kafka's
    catalogue is unknown; a Kafka-only name is checked by Kafka's type and validator."""
    checked: dict[str, str] = {}
    for name, value in overrides.items():
        if value is None:
            raise InvalidConfigError(f"Null value not supported for topic configs: {name}")
        check_topic_value(name, value)
        checked[name] = value
    LogConfig.from_configs(checked, configs.config.values)
    return checked


def check_topic_value(name: str, value: str) -> None:
    """Raise InvalidConfigError unless ``value`` is valid for topic config ``name``."""
    if name in TOPIC_CONFIGS:
        validate_topic_config(name, value)
        return
    kafka = KAFKA_ONLY_TOPIC_CONFIGS.get(name)
    if kafka is None:
        raise InvalidConfigError(f"Unknown topic config name: {name}")
    try:
        kc.check_value(kafka, value)
    except kc.ConfigValueError as exc:
        raise InvalidConfigError(str(exc)) from None


async def apply_topic_overrides(
    registry: TopicRegistry, logs: LogManager, topic: str, overrides: Mapping[str, str]
) -> None:
    """Persist ``overrides`` as the topic's whole override set and reconfigure its logs."""
    await registry.set_configs(topic, dict(overrides))
    logs.update_topic_config(topic, dict(overrides))


def incremental(
    configs: DynamicConfig, current: Mapping[str, str], ops: Iterable[tuple[str, int, str | None]]
) -> dict[str, str]:
    """The topic override set after IncrementalAlterConfigs' SET/DELETE/APPEND/SUBTRACT ops."""

    def spec_type(name: str) -> str | None:
        spec = TOPIC_CONFIGS.get(name)
        if spec is not None:
            return spec.type
        kafka = KAFKA_ONLY_TOPIC_CONFIGS.get(name)
        return kafka.type if kafka is not None else None

    def base(name: str) -> str:
        if name in TOPIC_CONFIGS:
            return effective_configs({}, configs.config.values)[name][0]
        return KAFKA_ONLY_TOPIC_CONFIGS[name].default or ""

    return apply_ops(current, ops, spec_type, base, "topic")


async def incremental_broker(
    configs: DynamicConfig, entity: str, ops: Iterable[tuple[str, int, str | None]]
) -> dict[str, str]:
    """A broker entity's dynamic config set after IncrementalAlterConfigs' ops."""

    def spec_type(name: str) -> str | None:
        spec = defs.BROKER_CONFIGS.get(defs.base_name(name))  # listener.name.<l>.<config>
        return spec.type if spec is not None else None

    def base(name: str) -> str:
        return (configs.config.values.get(name)
                or defs.BROKER_CONFIGS[defs.base_name(name)].default or "")  # fmt: skip

    return apply_ops(await configs.current(entity), ops, spec_type, base, "broker")


def apply_ops(
    current: Mapping[str, str],
    ops: Iterable[tuple[str, int, str | None]],
    spec_type: Callable[[str], str | None],
    base_value: Callable[[str], str],
    kind: str,
) -> dict[str, str]:
    """SET/DELETE/APPEND/SUBTRACT on a config set; APPEND/SUBTRACT on list configs only,
    starting from the current effective value (``base_value``)."""
    result = dict(current)
    seen: set[str] = set()
    for name, op, value in ops:
        if name in seen:
            raise KafkaError(
                ErrorCode.invalid_request, f"Error due to duplicate config keys: {name}"
            )
        seen.add(name)
        ctype = spec_type(name)
        if ctype is None:
            raise InvalidConfigError(f"Unknown {kind} config name: {name}")
        if op == SET:
            if value is None:
                raise InvalidConfigError(f"Null value not supported for {kind} configs: {name}")
            result[name] = value
        elif op == DELETE:
            result.pop(name, None)
        elif op in (APPEND, SUBTRACT):
            if ctype != "list":
                verb = "append" if op == APPEND else "subtract"
                raise InvalidConfigError(
                    f"Config value {verb} is not allowed for config key: {name}"
                )
            base = result.get(name)
            if base is None:
                base = base_value(name)
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


async def alter_each_resource(
    ctx: RequestContext, request: Any, alter: Callable[[RequestContext, Any, bool], Awaitable[None]]
) -> Any:
    """The AlterConfigs / IncrementalAlterConfigs response: ``alter`` runs per resource, and
    whatever it raises becomes that resource's error code and message. ALTER_CONFIGS on the
    resource is checked first (:func:`strom.broker.authz.require_config`)."""
    responses = []
    for resource in request.resources:
        try:
            authz.require_config(ctx, authz.ALTER_CONFIGS, int(resource.resource_type),
                                 str(resource.resource_name))  # fmt: skip
            await alter(ctx, resource, bool(request.validate_only))
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


def resource_to_alter(ctx: RequestContext, resource: Any) -> TopicInfo | GroupTarget | str:
    """What an AlterConfigs-style resource names: a topic (its info), a group, or a broker
    entity (``dynamic_config`` entity: a broker id, or the cluster default for ``""``)."""
    rtype = int(resource.resource_type)
    name = resource.resource_name
    if rtype == BROKER:
        return dc.entity_of(name)
    if rtype == GROUP:
        if not name:
            raise KafkaError(ErrorCode.invalid_request, "Group name must not be empty")
        return GroupTarget(str(name))
    if rtype != TOPIC:
        raise KafkaError(ErrorCode.invalid_request, f"unsupported resource type {rtype}")
    info = ctx.topics.get(name)
    if info is None:
        raise KafkaError(ErrorCode.unknown_topic_or_partition, f"Topic '{name}' does not exist.")
    return info


async def incremental_group(configs: DynamicConfig, group: str,
                            ops: Iterable[tuple[str, int, str | None]]) -> dict[str, str]:  # fmt: skip
    """A group's config set after IncrementalAlterConfigs' ops."""

    def spec_type(name: str) -> str | None:
        defn = kc.GROUP.get(name)
        return defn.type if defn is not None else None

    def base(name: str) -> str:
        return kc.GROUP[name].default or ""

    return apply_ops(await gc.read(configs.store, group), ops, spec_type, base, "group")


async def alter_group(configs: DynamicConfig, group: str, wanted: Mapping[str, str | None],
                      validate_only: bool) -> None:  # fmt: skip
    """Make ``wanted`` the group's whole config set (or only check it)."""
    gc.validate(wanted, configs.config.values)
    if not validate_only:
        await gc.write(configs.store, group, {k: v for k, v in wanted.items() if v is not None})


async def describe_group(configs: DynamicConfig, group: str,
                         keys: Iterable[str] | None = None) -> list[ConfigEntry]:  # fmt: skip
    """Every group config of ``group`` (or those in ``keys``) with its value and source."""
    own = await gc.read(configs.store, group)
    return [ConfigEntry(name=name, value=value, source=source,
                        config_type=CONFIG_TYPES.get(ctype, 0), documentation=doc or None,
                        synonyms=[(name, value, source)])
            for name, value, source, ctype, doc in gc.describe(own, configs.config.values, keys)]


async def alter_broker(
    ctx: RequestContext, entity: str, configs: Mapping[str, str], validate_only: bool
) -> None:
    """Make ``configs`` the broker entity's dynamic set (or only check it)."""
    if validate_only:
        ctx.configs.validate(entity, configs)
    else:
        await ctx.configs.apply(entity, configs)
