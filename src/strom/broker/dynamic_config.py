"""Dynamic broker configs: kept in the metadata store, applied without a restart.

Two entities, as Kafka's ZooKeeper layout has them: ``/config/brokers/<id>`` (one broker's own,
DYNAMIC_BROKER_CONFIG) and ``/config/brokers/<default>`` (the cluster-wide default,
DYNAMIC_DEFAULT_BROKER_CONFIG); each node holds ``{"version": 1, "config": {name: value}}``.
The broker's own beats the default, which beats the static config (file and ``--set``), which
beats Kafka's default; a name hides its synonyms below it (:mod:`strom.config`).

A change is validated whole before anything is written (Kafka's rules and errors,
:meth:`DynamicConfig.validate`: only Kafka's dynamic configs, each value valid for its type, and
every topic's log config still valid with the new defaults), then persisted, then applied: :class:`~strom.config.BrokerConfig` values change in
place (``message.max.bytes`` and every other reader sees them at the next request) and every
log gets its config again (:meth:`~strom.storage.log_manager.LogManager.update_broker_configs`),
so a new ``log.retention.ms`` reaches every topic without its own ``retention.ms``.

Every broker watches its own entity and the default (re-armed at each change, re-read after a
lost store session), so a change written through any broker of a cluster applies on the broker
it names; the broker that wrote it applies it at once as well.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from strom.broker import broker_config_defs as defs
from strom.kafka_configs import ConfigValueError
from strom.metadata import config_changes
from strom.metadata.store import (
    MetadataStore,
    NodeExistsError,
    NoNodeError,
    SessionState,
    StoreError,
    WatchCallback,
    WatchEvent,
)
from strom.protocol.errors import ErrorCode, KafkaError
from strom.storage.errors import InvalidConfigError
from strom.storage.log_config import LogConfig

if TYPE_CHECKING:
    from strom.broker.node import NodeIdentity
    from strom.config import BrokerConfig
    from strom.metadata.topics import TopicRegistry

log = logging.getLogger(__name__)
PATH = "/config/brokers"
DEFAULT_ENTITY = "<default>"

# ConfigEntry.ConfigSource codes
DYNAMIC_BROKER, DYNAMIC_DEFAULT, STATIC, DEFAULT = 2, 3, 4, 5
Synonym = tuple[str, str | None, int]


async def read(store: MetadataStore, entity: str, watch: WatchCallback | None = None) -> dict[str, str]:
    try:
        data, _stat = await store.get(f"{PATH}/{entity}", watch=watch)
    except NoNodeError:
        return {}
    return {str(k): str(v) for k, v in json.loads(data).get("config", {}).items()}


async def write(store: MetadataStore, entity: str, configs: Mapping[str, str]) -> None:
    """Replace ``entity``'s configs, announced in ``/config/changes`` for Kafka's brokers
    sharing the store (:mod:`strom.metadata.config_changes`)."""
    data = json.dumps({"version": 1, "config": dict(configs)}, sort_keys=True).encode()
    path = f"{PATH}/{entity}"
    try:
        await store.set(path, data)
    except NoNodeError:
        try:
            await store.create(path, data)
        except NodeExistsError:
            await store.set(path, data)
    await config_changes.notify(store, f"brokers/{entity}")


class DynamicConfig:
    """One broker's dynamic configs: loaded at start-up, watched, validated, applied.

    ``config`` is the broker's :class:`~strom.config.BrokerConfig` (changed in place);
    listeners added with :meth:`on_change` hear every change of the values in force (the
    assembly adds the log manager's ``update_broker_configs`` once the logs are loaded)."""

    def __init__(self, store: MetadataStore, config: BrokerConfig, node: NodeIdentity,
                 topics: TopicRegistry) -> None:  # fmt: skip
        self.store = store
        self.config = config
        self.node = node
        self.topics = topics
        self._listeners: list[Callable[[Mapping[str, str]], None]] = []
        self._watcher = _Watcher(self)

    @property
    def node_id(self) -> int:
        return self.node.node_id

    def on_change(self, listener: Callable[[Mapping[str, str]], None]) -> None:
        self._listeners.append(listener)

    async def load(self) -> None:
        """Read both entities into the broker's config (at start-up, before the logs open),
        and watch them: a change written through any broker of the cluster applies here."""
        watcher = self._watcher
        self.store.add_session_listener(watcher.on_session)
        own = await read(self.store, str(self.node_id), watcher.on_change)
        default = await read(self.store, DEFAULT_ENTITY, watcher.on_change)
        self.config.set_dynamic(default, own, defs.synonyms)
        if own or default:
            log.info("dynamic broker configs: %d cluster-wide, %d for this broker", len(default),
                     len(own))  # fmt: skip

    def use(self, entity: str, configs: Mapping[str, str]) -> None:
        """Make ``configs`` the entity's dynamic set in this broker's config (if it is ours
        and changed) and tell the listeners (the logs are reconfigured)."""
        cfg = self.config
        if entity == DEFAULT_ENTITY:
            if dict(configs) == cfg.dynamic_default:
                return
            cfg.set_dynamic(configs, cfg.dynamic_broker, defs.synonyms)
        elif entity == str(self.node_id):
            if dict(configs) == cfg.dynamic_broker:
                return
            cfg.set_dynamic(cfg.dynamic_default, configs, defs.synonyms)
        else:
            return  # another broker's: it watches its own
        for listener in self._listeners:
            listener(cfg.values)
        shown = {k: "[hidden]" if defs.is_sensitive(defs.base_name(k)) else v
                 for k, v in configs.items()}  # passwords, inline TLS keys: never logged
        log.info("dynamic broker config %s is now %s", entity, shown)

    async def current(self, entity: str) -> dict[str, str]:
        if entity == DEFAULT_ENTITY:
            return dict(self.config.dynamic_default)
        if entity == str(self.node_id):
            return dict(self.config.dynamic_broker)
        return await read(self.store, entity)

    def validate(self, entity: str, configs: Mapping[str, str]) -> None:
        """Raise unless ``configs`` may become ``entity``'s dynamic set, with Kafka's errors:
        a name in no catalogue is INVALID_CONFIG "Unknown broker configs"; the rest is Kafka's
        ``DynamicBrokerConfig.validate``, whose refusals its ``ConfigAdminManager`` answers
        INVALID_REQUEST with the message as is: a read-only name ("Cannot update these configs
        dynamically"), a per-broker name at the cluster default ("Cannot update these configs
        at default cluster level, broker id must be specified"), a value of the wrong type or
        out of its validator's range; then every topic's log config must still be valid with
        the new defaults."""
        base = defs.base_name  # a listener's override: its config's rules
        unknown = sorted(n for n in configs if base(n) not in defs.BROKER_CONFIGS)
        if unknown:
            raise InvalidConfigError(f"Unknown broker configs: {', '.join(unknown)}")
        fixed = sorted(n for n in configs if base(n) not in defs.DYNAMIC_CONFIGS)
        if fixed:
            raise KafkaError(ErrorCode.invalid_request,
                             f"Cannot update these configs dynamically: {_scala_set(fixed)}")
        if entity == DEFAULT_ENTITY:
            per_broker = sorted(n for n in configs if base(n) in defs.PER_BROKER_ONLY)
            if per_broker:
                raise KafkaError(ErrorCode.invalid_request, "Cannot update these configs at "
                                 "default cluster level, broker id must be specified: "
                                 f"{_scala_set(per_broker)}")  # fmt: skip
        for name, value in configs.items():
            try:
                defs.check_value(base(name), value)
            except ConfigValueError as exc:
                raise KafkaError(ErrorCode.invalid_request, str(exc)) from None
        cfg = self.config
        default = configs if entity == DEFAULT_ENTITY else cfg.dynamic_default
        own = configs if entity == str(self.node_id) else cfg.dynamic_broker
        values = cfg.merged(default, own, defs.synonyms)
        LogConfig.from_configs({}, values)
        for topic in self.topics:
            LogConfig.from_configs(topic.configs, values)

    async def apply(self, entity: str, configs: Mapping[str, str]) -> None:
        """Validate, persist, then apply ``configs`` as ``entity``'s whole dynamic set (the
        other brokers apply it when their watch fires)."""
        self.validate(entity, configs)
        await write(self.store, entity, configs)
        self.use(entity, configs)

    def broker_synonyms(self, names: Iterable[str], sensitive: bool) -> list[Synonym]:
        """Where each of ``names`` is set, in Kafka's order: this broker's dynamic config,
        the cluster default, the static config, Kafka's default."""
        cfg = self.config
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


class _Watcher:
    """Re-reads an entity when its node changes (and both after a lost session), applying
    what changed; the watch callbacks run on the loop."""

    def __init__(self, owner: DynamicConfig) -> None:
        self.owner = owner
        self.lost = False
        self.tasks: set[asyncio.Task[None]] = set()

    def on_change(self, event: WatchEvent) -> None:
        self._spawn(event.path.rsplit("/", 1)[1])

    def on_session(self, state: SessionState) -> None:
        if state is SessionState.LOST:
            self.lost = True
        elif state is SessionState.CONNECTED and self.lost:
            self.lost = False
            self._spawn(str(self.owner.node_id))
            self._spawn(DEFAULT_ENTITY)

    def _spawn(self, entity: str) -> None:
        task = asyncio.get_running_loop().create_task(self._reload(entity))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _reload(self, entity: str) -> None:
        try:
            configs = await read(self.owner.store, entity, self.on_change)
        except StoreError as exc:  # the session is gone: re-read when it is back
            log.warning("dynamic broker config %s could not be re-read: %s", entity, exc)
            return
        self.owner.use(entity, configs)


def _scala_set(names: list[str]) -> str:
    """As Kafka's message prints a Scala set."""
    return f"Set({', '.join(names)})"


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
