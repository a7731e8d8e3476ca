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

Password configs (Kafka's PASSWORD type, :func:`~strom.broker.broker_config_defs.is_dynamic_password`)
are encrypted at rest, as Kafka's ZooKeeper-mode brokers do (:class:`StoredPasswords`,
:mod:`strom.broker.password_encoder` for the stored format): a set holding one is only written
with ``password.encoder.secret`` configured (else INVALID_CONFIG, Kafka's "Password encoder
secret not configured"), and what is read is decoded before anything uses it; a value this
broker cannot decode is logged and ignored (not applied), as Kafka does. Every other value, and
the node's document, are stored as before. A password an older strom stored in plain text is
read as it is (a warning, once per name), and re-encoded on the broker's next start-up with a
secret, when its own entity is rewritten (:meth:`DynamicConfig.load`), or at the entity's next
write. At start-up with ``password.encoder.old.secret`` too, the broker's own passwords that
the old secret decodes are re-encoded with the new one and written back (Kafka's rotation).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from strom.broker import broker_config_defs as defs
from strom.broker import password_encoder as pe
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


class StoredPasswords:
    """The password configs of an entity's set, encoded for the store and decoded from it.

    ``encoder`` is ``password.encoder.secret``'s (None: unset), ``old`` is
    ``password.encoder.old.secret``'s (rotation only). A value that already has the stored
    format is written as it is: one this broker could not decode (another broker's secret)
    stays as it was when a broker alters another broker's set."""

    def __init__(self, encoder: pe.PasswordEncoder | None, old: pe.PasswordEncoder | None) -> None:
        self.encoder = encoder
        self.old = old
        self._warned: set[tuple[str, str]] = set()

    @classmethod
    def from_config(cls, values: Mapping[str, str]) -> StoredPasswords:
        """From the static ``password.encoder.*`` configs; a bad one is a ConfigError."""
        return cls(*pe.encoders_from_config(values))

    def check_can_store(self, entity: str, configs: Mapping[str, str]) -> None:
        """Raise Kafka's INVALID_CONFIG when ``configs`` holds a password and no secret is
        configured (Kafka's ``ConfigAdminManager`` message around ``ConfigException``)."""
        if self.encoder is None and any(defs.is_dynamic_password(n) for n in configs):
            name = "" if entity == DEFAULT_ENTITY else entity
            raise InvalidConfigError(
                f"Invalid config value for resource ConfigResource(type=BROKER, name='{name}'): "
                "Password encoder secret not configured")

    def encode(self, entity: str, configs: Mapping[str, str]) -> dict[str, str]:
        """``configs`` as stored: each password encrypted (with a fresh salt and IV)."""
        out = dict(configs)
        for name, value in configs.items():
            if defs.is_dynamic_password(name) and not pe.looks_encoded(value):
                self.check_can_store(entity, {name: value})
                assert self.encoder is not None
                out[name] = self.encoder.encode(value)
        return out

    def decode(self, entity: str, stored: Mapping[str, str], keep: bool = False) -> dict[str, str]:
        """``stored`` with each password decoded; one that cannot be is logged and left out
        (``keep``: kept encoded, to be written back as it was)."""
        out = dict(stored)
        for name, value in stored.items():
            if not defs.is_dynamic_password(name):
                continue
            if not pe.looks_encoded(value):
                if (entity, name) not in self._warned:
                    self._warned.add((entity, name))
                    log.warning("dynamic password config %s of broker entity %s is stored in "
                                "plain text (by an older strom): with %s set it is encrypted "
                                "at the next start-up or write", name, entity,
                                pe.SECRET)  # fmt: skip
                continue
            try:
                if self.encoder is None:
                    raise pe.PasswordDecodeError(f"{pe.SECRET} is not set")
                out[name] = self.encoder.decode(value)
            except pe.PasswordDecodeError as exc:
                log.error("Dynamic password config %s of broker entity %s could not be decoded, "
                          "ignoring: %s", name, entity, exc)  # fmt: skip
                if not keep:
                    del out[name]
        return out

    def rotate(self, stored: Mapping[str, str]) -> dict[str, str] | None:
        """``stored`` with every password the old secret decodes (or an older strom left in
        plain text) encoded with the secret; None when nothing changes."""
        if self.encoder is None:
            return None
        out = dict(stored)
        for name, value in stored.items():
            if not defs.is_dynamic_password(name):
                continue
            if not pe.looks_encoded(value):
                out[name] = self.encoder.encode(value)
                continue
            if self.old is None:
                continue
            try:
                out[name] = self.encoder.encode(self.old.decode(value))
            except pe.PasswordDecodeError:
                log.debug("dynamic password config %s could not be decoded with the old "
                          "secret; the new secret will be used", name)  # fmt: skip
        return out if out != dict(stored) else None


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
        #: checks of a whole new set of values (a SASL listener's settings must build):
        #: each raises ValueError with Kafka's message
        self._checks: list[Callable[[Mapping[str, str]], object]] = []
        self._watcher = _Watcher(self)
        self.passwords = StoredPasswords.from_config(config.values)

    @property
    def node_id(self) -> int:
        return self.node.node_id

    def on_change(self, listener: Callable[[Mapping[str, str]], None]) -> None:
        self._listeners.append(listener)

    def check_with(self, check: Callable[[Mapping[str, str]], object]) -> None:
        """Have :meth:`validate` refuse a change after which ``check(values)`` raises
        ValueError (INVALID_REQUEST with its message, as Kafka refuses a reconfiguration
        its listener's ``validateReconfiguration`` refuses)."""
        self._checks.append(check)

    async def load(self) -> None:
        """Read both entities into the broker's config (at start-up, before the logs open),
        and watch them: a change written through any broker of the cluster applies here."""
        watcher = self._watcher
        self.store.add_session_listener(watcher.on_session)
        await self._reencode(str(self.node_id))
        own = await self.read(str(self.node_id), watcher.on_change)
        default = await self.read(DEFAULT_ENTITY, watcher.on_change)
        self.config.set_dynamic(default, own, defs.synonyms)
        if own or default:
            log.info("dynamic broker configs: %d cluster-wide, %d for this broker", len(default),
                     len(own))  # fmt: skip

    async def _reencode(self, entity: str) -> None:
        """Kafka's start-up rotation: the entity's passwords encoded with the old secret (or
        in plain text by an older strom) written back encoded with the secret."""
        stored = await read(self.store, entity)
        rotated = self.passwords.rotate(stored)
        if rotated is not None:
            await write(self.store, entity, rotated)
            names = sorted(n for n, v in rotated.items() if v != stored[n])
            log.info("dynamic password configs of broker entity %s re-encoded with %s: %s",
                     entity, pe.SECRET, ", ".join(names))  # fmt: skip

    async def read(self, entity: str, watch: WatchCallback | None = None,
                   keep: bool = False) -> dict[str, str]:  # fmt: skip
        """The entity's dynamic set from the store, passwords decoded (:meth:`StoredPasswords.decode`)."""
        stored = await read(self.store, entity, watch)
        if any(defs.is_dynamic_password(n) for n in stored):  # PBKDF2, milliseconds a password:
            return await asyncio.to_thread(self.passwords.decode, entity, stored, keep)  # a thread
        return self.passwords.decode(entity, stored, keep)

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
        return await self.read(entity, keep=True)  # another broker's: its secret may differ

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
        self.passwords.check_can_store(entity, configs)
        values = cfg.merged(default, own, defs.synonyms)
        for check in self._checks:
            try:
                check(values)
            except ValueError as exc:
                raise KafkaError(ErrorCode.invalid_request, str(exc)) from None
        LogConfig.from_configs({}, values)
        for topic in self.topics:
            LogConfig.from_configs(topic.configs, values)

    async def apply(self, entity: str, configs: Mapping[str, str]) -> None:
        """Validate, persist, then apply ``configs`` as ``entity``'s whole dynamic set (the
        other brokers apply it when their watch fires)."""
        self.validate(entity, configs)
        stored: Mapping[str, str] = configs
        if any(defs.is_dynamic_password(n) for n in configs):  # PBKDF2 off the loop, as above
            stored = await asyncio.to_thread(self.passwords.encode, entity, configs)
        await write(self.store, entity, stored)
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
            configs = await self.owner.read(entity, self.on_change)
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
