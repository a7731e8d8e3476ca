"""Client quota configs in the metadata store: Kafka's nodes, cached and watched on every broker.

Nodes (Kafka's ZooKeeper layout, the same in the embedded store):

``/config/users/<u>``                 ``{"version": 1, "config": {"producer_byte_rate": "1024", …}}``
``/config/users/<u>/clients/<c>``     same shape
``/config/clients/<c>``               same shape

``<u>`` and ``<c>`` are sanitized names or ``<default>`` (:mod:`strom.security.quotas`); values
are strings, as Kafka's ``Properties`` hold them (a LONG quota as ``"1024"``, a DOUBLE as
``"50.0"``). A user's node also holds its SCRAM credentials (``SCRAM-SHA-256`` …, written by
the SASL work): every write here is a read-modify-write at the node's version (retried when
another writer came between), which changes the quota keys it is given and keeps every other
key, and readers take the quota keys only. A node whose config holds no quota is left in place
(Kafka keeps it too); a parent made for a ``users/<u>/clients/<c>`` node is empty.

Every broker keeps all of it in its :class:`~strom.security.quotas.ClientQuotas` through
one-shot watches, re-armed as they fire: the children of ``/config/users``,
``/config/clients`` and each ``/config/users/<u>/clients`` (an entity appears or goes), the
data of each entity node (its quotas change), and the creation of a parent not there yet. A
change written through any broker therefore applies on every broker without a restart; the
broker that wrote it applies it at once as well. After a lost store session everything is
listed and read again. Kafka's ZooKeeper brokers learn of a change through a sequential
``/config/changes/config_change_<n>`` node instead: one is written after each alteration
(:mod:`strom.metadata.config_changes`), so a Kafka broker sharing the store applies it too.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from strom.metadata import config_changes
from strom.metadata.store import (
    BadVersionError,
    MetadataStore,
    NodeExistsError,
    NoNodeError,
    SessionState,
    StoreError,
    WatchEvent,
)
from strom.metadata.watch_tasks import WatchTasks
from strom.security.quotas import ClientQuotas, Entity, apply_ops, parse_configs

log = logging.getLogger(__name__)
USERS = "/config/users"
CLIENTS = "/config/clients"
_WRITE_ATTEMPTS = 20


def entity_path(entity: Entity) -> str:
    if entity.user is not None and entity.client is not None:
        return f"{USERS}/{entity.user}/clients/{entity.client}"
    if entity.user is not None:
        return f"{USERS}/{entity.user}"
    if entity.client is not None:
        return f"{CLIENTS}/{entity.client}"
    raise ValueError("an entity names a user, a client id or both")


def path_entity(path: str) -> Entity | None:
    """The entity of an entity node's path; None for any other path."""
    parts = path.split("/")
    if len(parts) == 4 and parts[2] == "users":
        return Entity(parts[3], None)
    if len(parts) == 4 and parts[2] == "clients":
        return Entity(None, parts[3])
    if len(parts) == 6 and parts[2] == "users" and parts[4] == "clients":
        return Entity(parts[3], parts[5])
    return None


def decode(data: bytes) -> dict[str, Any]:
    """A node's document (``{}`` for an empty parent or a document that does not parse)."""
    if not data:
        return {}
    try:
        doc = json.loads(data)
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def encode(doc: Mapping[str, Any]) -> bytes:
    return json.dumps(doc, sort_keys=True).encode()


class QuotaStore:
    """The quota configs of every entity: loaded at start, watched, altered (module doc)."""

    def __init__(self, store: MetadataStore, quotas: ClientQuotas) -> None:
        self.store = store
        self.quotas = quotas
        self._known: set[str] = set()  # entity node paths read (and watched)
        self._data_armed: set[str] = set()  # paths with a data watch pending
        self._child_armed: set[str] = set()  # paths with a child watch pending
        self._lost = False
        self._background = WatchTasks("client quotas")  # re-reads started by watches

    async def start(self) -> None:
        self.store.add_session_listener(self._on_session)
        await self._list(USERS)
        await self._list(CLIENTS)
        if self.quotas.entities:
            log.info("client quotas: %d entities", len(self.quotas.entities))

    async def close(self) -> None:
        await self._background.close()

    # --- writing ------------------------------------------------------------------------------
    async def alter(self, entity: Entity, ops: Iterable[tuple[str, float, bool]],
                    validate_only: bool = False) -> dict[str, float]:  # fmt: skip
        """Apply ``ops`` (key, value, remove) to ``entity``'s node, keeping every key that is
        not a quota; its quotas after. Raises :class:`~strom.security.quotas.QuotaError`
        before anything is written, StoreError when the store cannot be written."""
        ops = list(ops)
        path = entity_path(entity)
        for _attempt in range(_WRITE_ATTEMPTS):
            try:
                data, stat = await self.store.get(path)
                version: int | None = stat.version
            except NoNodeError:
                data, version = b"", None
            doc = decode(data)
            config = doc.get("config")
            config = dict(config) if isinstance(config, dict) else {}
            new_config = apply_ops(config, ops)
            quotas = parse_configs(new_config)
            if validate_only:
                return quotas
            doc = {**doc, "version": 1, "config": new_config}
            try:
                if version is None:
                    await self.store.create(path, encode(doc))
                else:
                    await self.store.set(path, encode(doc), version)
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue  # another writer came between (SCRAM credentials, another broker)
            await config_changes.notify(self.store, path.removeprefix("/config/"))
            if self.quotas.update(entity, quotas):
                log.info("client quotas of %s now %s", entity.describe(), quotas or "none")
            return quotas
        raise StoreError(f"{path} kept changing: quota alteration not written")

    # --- watching -----------------------------------------------------------------------------
    def _on_child(self, event: WatchEvent) -> None:
        self._child_armed.discard(event.path)
        self._background.spawn(self._list(event.path))

    def _on_data(self, event: WatchEvent) -> None:
        self._data_armed.discard(event.path)
        if path_entity(event.path) is not None:
            self._background.spawn(self._read(event.path))
        else:  # a parent created (or gone): list it
            self._background.spawn(self._list(event.path))

    def _on_session(self, state: SessionState) -> None:
        if state is SessionState.LOST:
            self._lost = True
        elif state is SessionState.CONNECTED and self._lost:
            self._lost = False
            self._data_armed.clear()  # a lost session's watches never fire
            self._child_armed.clear()
            self._background.spawn(self._reload_all())

    async def _reload_all(self) -> None:
        await self._list(USERS)
        await self._list(CLIENTS)
        for path in sorted(self._known):
            await self._read(path)

    async def _list(self, parent: str) -> None:
        """List ``parent``'s entities (watching it), read the new ones, drop the gone ones."""
        watch = None if parent in self._child_armed else self._on_child
        try:
            kids = await self.store.children(parent, watch=watch)
        except NoNodeError:
            watch = None if parent in self._data_armed else self._on_data
            self._data_armed.add(parent)
            if await self.store.exists(parent, watch=watch) is not None:
                self._background.spawn(self._list(parent))  # made meanwhile
            kids = []
        else:
            self._child_armed.add(parent)
        present = {f"{parent}/{kid}" for kid in kids}
        depth = parent.count("/") + 1
        for path in sorted(p for p in self._known
                           if p.startswith(parent + "/") and p.count("/") == depth
                           and p not in present):  # fmt: skip
            self._known.discard(path)
            self._forget(path)
        for path in sorted(present):
            if path_entity(path) is None:
                continue
            if path not in self._known:
                self._known.add(path)
                await self._read(path)
            if parent == USERS:
                await self._list(f"{path}/clients")

    def _forget(self, path: str) -> None:
        entity = path_entity(path)
        if entity is not None and self.quotas.update(entity, {}):
            log.info("client quotas of %s removed", entity.describe())

    async def _read(self, path: str) -> None:
        entity = path_entity(path)
        assert entity is not None
        watch = None if path in self._data_armed else self._on_data
        try:
            data, _stat = await self.store.get(path, watch=watch)
        except NoNodeError:
            self._data_armed.add(path)  # armed for its creation
            self._forget(path)
            return
        self._data_armed.add(path)
        config = decode(data).get("config")
        quotas = parse_configs(config if isinstance(config, dict) else {})
        if self.quotas.update(entity, quotas):
            log.info("client quotas of %s now %s", entity.describe(), quotas or "none")
