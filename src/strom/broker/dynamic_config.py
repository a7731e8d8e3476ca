"""Dynamic broker configs: kept in the metadata store, applied without a restart.

Two entities, as Kafka's ZooKeeper layout has them: ``/config/brokers/<id>`` (one broker's own,
DYNAMIC_BROKER_CONFIG) and ``/config/brokers/<default>`` (the cluster-wide default,
DYNAMIC_DEFAULT_BROKER_CONFIG); each node holds ``{"version": 1, "config": {name: value}}``.
The broker's own beats the default, which beats the static config (file and ``--set``), which
beats Kafka's default; a name hides its synonyms below it (:mod:`strom.config`).

A change is validated whole before anything is written (only dynamic configs, each value parsed
as its type, and every topic's log config still valid with the new defaults: INVALID_CONFIG
otherwise), then persisted, then applied: :class:`~strom.config.BrokerConfig` values change in
place (``message.max.bytes`` and every other reader sees them at the next request) and every
log gets its config again (:meth:`~strom.storage.log_manager.LogManager.update_broker_configs`),
so a new ``log.retention.ms`` reaches every topic without its own ``retention.ms``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from strom.broker import broker_config_defs as defs
from strom.metadata.store import NoNodeError, SyncMetadataStore
from strom.protocol.errors import ErrorCode, KafkaError
from strom.storage.errors import InvalidConfigError
from strom.storage.log_config import LogConfig, validate_topic_config

if TYPE_CHECKING:
    from strom.broker.broker import Broker

log = logging.getLogger(__name__)
PATH = "/config/brokers"
DEFAULT_ENTITY = "<default>"

# ConfigEntry.ConfigSource codes
DYNAMIC_BROKER, DYNAMIC_DEFAULT, STATIC, DEFAULT = 2, 3, 4, 5
Synonym = tuple[str, str | None, int]


def read(store: SyncMetadataStore, entity: str) -> dict[str, str]:
    try:
        data, _version = store.get(f"{PATH}/{entity}")
    except NoNodeError:
        return {}
    return {str(k): str(v) for k, v in json.loads(data).get("config", {}).items()}


def write(store: SyncMetadataStore, entity: str, configs: Mapping[str, str]) -> None:
    data = json.dumps({"version": 1, "config": dict(configs)}, sort_keys=True).encode()
    path = f"{PATH}/{entity}"
    if store.exists(path) is None:
        store.create(path, data)
    else:
        store.set(path, data)


def load(broker: Broker) -> None:
    """Read both entities into the broker's config (at start-up, before the logs open)."""
    own = read(broker.store.sync, str(broker.node_id))
    default = read(broker.store.sync, DEFAULT_ENTITY)
    broker.config.set_dynamic(default, own, defs.synonyms)
    if own or default:
        log.info("dynamic broker configs: %d cluster-wide, %d for this broker", len(default),
                 len(own))  # fmt: skip


def entity_of(resource_name: str | None) -> str:
    """A BROKER resource's store entity: ``""`` is the cluster default, else a broker id."""
    if not resource_name:
        return DEFAULT_ENTITY
    try:
        return str(int(resource_name))
    except ValueError:
        raise KafkaError(
            ErrorCode.invalid_request, f"Broker id must be an integer, but it is: {resource_name}"
        ) from None


def current(broker: Broker, entity: str) -> dict[str, str]:
    if entity == DEFAULT_ENTITY:
        return dict(broker.config.dynamic_default)
    if entity == str(broker.node_id):
        return dict(broker.config.dynamic_broker)
    return read(broker.store.sync, entity)


def validate(broker: Broker, entity: str, configs: Mapping[str, str]) -> None:
    """Raise InvalidConfigError unless ``configs`` may become ``entity``'s dynamic set."""
    unknown = sorted(n for n in configs if n not in defs.BROKER_CONFIGS)
    if unknown:
        raise InvalidConfigError(f"Unknown broker configs: {', '.join(unknown)}")
    fixed = sorted(n for n in configs if n not in defs.DYNAMIC_CONFIGS)
    if fixed:
        raise InvalidConfigError(f"Cannot update these configs dynamically: {', '.join(fixed)}")
    for name, value in configs.items():
        topic_name = defs.TOPIC_OF.get(name)
        if topic_name is not None:
            try:
                validate_topic_config(topic_name, value)
            except InvalidConfigError as exc:
                raise InvalidConfigError(str(exc).replace(topic_name, name)) from None
        else:
            try:
                int(value)
            except ValueError:
                raise InvalidConfigError(
                    f"Invalid value {value!r} for configuration {name}: not a number"
                ) from None
    cfg = broker.config
    default = configs if entity == DEFAULT_ENTITY else cfg.dynamic_default
    own = configs if entity == str(broker.node_id) else cfg.dynamic_broker
    values = cfg.merged(default, own, defs.synonyms)
    LogConfig.from_configs({}, values)
    for topic in broker.topics:
        LogConfig.from_configs(topic.configs, values)


def apply(broker: Broker, entity: str, configs: Mapping[str, str]) -> None:
    """Validate, persist, then apply ``configs`` as ``entity``'s whole dynamic set."""
    validate(broker, entity, configs)
    write(broker.store.sync, entity, configs)
    cfg = broker.config
    if entity == DEFAULT_ENTITY:
        cfg.set_dynamic(configs, cfg.dynamic_broker, defs.synonyms)
    elif entity == str(broker.node_id):
        cfg.set_dynamic(cfg.dynamic_default, configs, defs.synonyms)
    else:
        return  # another broker's: it reads the store when it starts
    broker.logs.update_broker_configs(cfg.values)
    log.info("dynamic broker config %s is now %s", entity, dict(configs))


# describing ----------------------------------------------------------------------------------
def broker_synonyms(broker: Broker, names: Iterable[str], sensitive: bool) -> list[Synonym]:
    """Where each of ``names`` is set, in Kafka's order: this broker's dynamic config, the
    cluster default, the static config, Kafka's default."""
    cfg = broker.config
    statics = {n: d.default for n, d in defs.BROKER_CONFIGS.items() if d.default is not None}
    layers = ((cfg.dynamic_broker, DYNAMIC_BROKER), (cfg.dynamic_default, DYNAMIC_DEFAULT),
              (cfg.explicit, STATIC), (statics, DEFAULT))  # fmt: skip
    names = list(names)
    out: list[Synonym] = []
    for layer, source in layers:
        for name in names:
            if name in layer:
                out.append((name, None if sensitive else layer[name], source))
    return out
