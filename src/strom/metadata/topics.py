"""Topics as the cluster knows them: id, partition assignment, config overrides.

Stored in the metadata store under Kafka's ZooKeeper paths, in Kafka's documents:

- ``/brokers/topics/<name>``: ``{"version": 3, "partitions": {"0": [1, 2], ...}, "topic_id":
  "<22-char base64url uuid, Kafka's Uuid.toString>", "adding_replicas": {}, "removing_replicas":
  {}}`` (replicas per partition, the first the preferred leader). strom's older
  ``{"id": "<uuid>", "partitions": …}`` is still read; a document with no id (Kafka's version 1)
  gets one, written back as version 3, as Kafka's controller does.
- ``/config/topics/<name>``: ``{"version": 1, "config": {"retention.ms": "1000", ...}}``
  (overrides only; written before the topic node, so a topic never exists without them).

:class:`TopicRegistry` validates names and keeps an in-memory view, read at :meth:`start` and
kept current by watches (the children of ``/brokers/topics``, each topic node, each config
node), so every broker of a cluster sees every topic, whoever created it. Its own writes update
the view when they return (read-your-writes); a watch re-read of a name with a local write in
flight is left to that write, so the view never shows a topic before its creator registered the
logs. After a lost store session everything is read again. It does not touch logs: listeners
(:meth:`add_listener`) hear of every topic that appears, changes or goes.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import re
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
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
from strom.metadata.zk_model import TOPIC_CONFIGS_PATH, TOPICS_PATH
from strom.protocol.errors import ErrorCode, KafkaError

CONFIGS_PATH = TOPIC_CONFIGS_PATH
MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
log = logging.getLogger(__name__)
TopicListener = Callable[[str, "TopicInfo | None"], None]


def validate_topic_name(name: str | None) -> str:
    """Kafka's rules: 1–249 of ``[a-zA-Z0-9._-]``, and not ``.`` or ``..``."""
    if not name:
        raise KafkaError(ErrorCode.invalid_topic_exception, "topic name is empty")
    if name in (".", ".."):
        raise KafkaError(ErrorCode.invalid_topic_exception, f"topic name {name!r} is not allowed")
    if len(name) > MAX_NAME_LENGTH:
        raise KafkaError(
            ErrorCode.invalid_topic_exception,
            f"topic name is {len(name)} characters, more than {MAX_NAME_LENGTH}",
        )
    if not _LEGAL.match(name):
        raise KafkaError(
            ErrorCode.invalid_topic_exception,
            f"topic name {name!r} has characters other than ASCII letters, digits, '.', '_', '-'",
        )
    return name


def uuid_to_kafka(topic_id: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString``: base64url of the 16 bytes, no padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def uuid_from_kafka(text: str) -> uuid.UUID:
    """Kafka's base64url form, or the hex form strom wrote before."""
    if len(text) == 22:
        return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))
    return uuid.UUID(text)


@dataclass
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    replicas: dict[int, list[int]]
    configs: dict[str, str] = field(default_factory=dict)
    version: int = -1  # the topic node's version when read (-1: not read)

    @property
    def partition_count(self) -> int:
        return len(self.replicas)

    @property
    def is_internal(self) -> bool:
        return self.name in INTERNAL_TOPICS


def topic_document(info: TopicInfo) -> bytes:
    """``/brokers/topics/<name>`` in Kafka's version 3."""
    return json.dumps({
        "version": 3,
        "partitions": {str(p): r for p, r in sorted(info.replicas.items())},
        "topic_id": uuid_to_kafka(info.topic_id),
        "adding_replicas": {},
        "removing_replicas": {},
    }).encode()  # fmt: skip


def parse_topic_document(name: str, data: bytes) -> tuple[uuid.UUID | None, dict[int, list[int]]]:
    doc: dict[str, Any] = json.loads(data)
    raw_id = doc.get("topic_id", doc.get("id"))
    replicas = {int(p): [int(b) for b in r] for p, r in doc.get("partitions", {}).items()}
    return (uuid_from_kafka(raw_id) if raw_id else None), replicas


def config_document(configs: Mapping[str, str]) -> bytes:
    return json.dumps({"version": 1, "config": dict(configs)}, sort_keys=True).encode()


class TopicRegistry:
    """Create, alter, delete and look up topics in a :class:`MetadataStore` (module doc)."""

    def __init__(self, store: MetadataStore) -> None:
        self._store = store
        self._topics: dict[str, TopicInfo] = {}
        #: the topic of that name, None if unknown (the view's own ``dict.get``: looked up for
        #: every partition of every Produce and Fetch request)
        self.get: Callable[[str], TopicInfo | None] = self._topics.get
        self._by_id: dict[uuid.UUID, TopicInfo] = {}
        self._local: set[str] = set()  # names with a write of this registry in flight
        self._watched: set[str] = set()  # names whose topic node has a watch armed
        self._cfg_watched: set[str] = set()  # names whose config node has a watch armed
        self._background = WatchTasks("topic registry")  # re-reads started by watches
        self._listeners: list[TopicListener] = []
        self._lost = False

    async def start(self) -> None:
        """Read every topic and set the watches."""
        self._store.add_session_listener(self._on_session)
        await self._read_all()

    async def close(self) -> None:
        await self._background.close()

    def add_listener(self, listener: TopicListener) -> None:
        """``listener(name, info)`` at every topic change seen; ``info`` None once it is gone."""
        self._listeners.append(listener)

    # --- the view --------------------------------------------------------------------------


    async def load(self, name: str) -> TopicInfo | None:
        """Read ``name`` from the store into the view now (its watch may not have fired yet);
        None if the store has no such topic."""
        if name not in self._topics:
            await self._read_topic(name)
        return self._topics.get(name)

    def by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self._by_id.get(topic_id)

    def __iter__(self) -> Iterator[TopicInfo]:
        return iter(list(self._topics.values()))

    def __contains__(self, name: object) -> bool:
        return name in self._topics

    def _install(self, info: TopicInfo) -> None:
        """Put ``info`` in the view; the same topic (same id) keeps its TopicInfo object, updated
        in place, so whoever holds it sees the change."""
        old = self._topics.get(info.name)
        if old is not None and old.topic_id == info.topic_id:
            if (old.replicas, old.configs, old.version) == (info.replicas, info.configs,
                                                            info.version):  # fmt: skip
                return
            old.replicas, old.configs, old.version = info.replicas, info.configs, info.version
            info = old
        elif old is not None:
            self._by_id.pop(old.topic_id, None)
        self._topics[info.name] = info
        self._by_id[info.topic_id] = info
        self._tell(info.name, info)

    def _remove(self, name: str) -> TopicInfo | None:
        info = self._topics.pop(name, None)
        if info is not None:
            self._by_id.pop(info.topic_id, None)
            self._tell(name, None)
        return info

    def _tell(self, name: str, info: TopicInfo | None) -> None:
        for listener in list(self._listeners):
            try:
                listener(name, info)
            except Exception:
                log.exception("topic listener failed for %s", name)

    # --- writes ----------------------------------------------------------------------------

    async def create(
        self, name: str, replicas: Mapping[int, list[int]], configs: Mapping[str, str],
        topic_id: uuid.UUID | None = None,
    ) -> TopicInfo:
        """``topic_id``: the id the controller gave it (a new one when None)."""
        validate_topic_name(name)
        if name in self._topics:
            raise KafkaError(ErrorCode.topic_already_exists, f"topic {name!r} already exists")
        info = TopicInfo(name, topic_id or uuid.uuid4(), {p: list(r) for p, r in replicas.items()},
                         dict(configs))  # fmt: skip
        self._local.add(name)
        try:
            # Configs first: a crash between the two writes leaves an orphan config, never a
            # topic created with the wrong settings.
            await self._write_configs(name, info.configs)
            try:
                made = await self._store.create(f"{TOPICS_PATH}/{name}", topic_document(info))
            except NodeExistsError:
                lost = True  # another broker was first
            else:
                lost = False
                info.version = made.version
                self._install(info)
        finally:
            self._local.discard(name)
        if lost:
            await self._read_topic(name)  # the winner's topic, in the view before we answer
            raise KafkaError(ErrorCode.topic_already_exists, f"topic {name!r} already exists")
        # Arm its watches later: the caller registers the logs in this step of the loop.
        self._background.spawn(self._read_topic(name))
        return info

    async def add_partitions(self, name: str, replicas: Mapping[int, list[int]]) -> TopicInfo:
        """Add partitions; the write is conditional on the version read, so a concurrent change
        by another broker is never overwritten (INVALID_PARTITIONS if it added the same ids)."""
        self._require(name)
        self._local.add(name)
        try:
            for _attempt in range(5):
                info = self._require(name)
                clash = sorted(p for p in replicas if p in info.replicas)
                if clash:
                    raise KafkaError(ErrorCode.invalid_partitions,
                                     f"Topic '{name}' already has partitions {clash}.")  # fmt: skip
                grown = TopicInfo(name, info.topic_id, dict(info.replicas), info.configs)
                grown.replicas.update({p: list(r) for p, r in replicas.items()})
                try:
                    stat = await self._store.set(
                        f"{TOPICS_PATH}/{name}", topic_document(grown), info.version
                    )
                except BadVersionError:
                    await self._read_topic(name, watch=False)
                    continue
                grown.version = stat.version
                self._install(grown)
                return self._topics[name]
            raise KafkaError(ErrorCode.reassignment_in_progress,
                             f"Topic '{name}' keeps changing; try again.")  # fmt: skip
        finally:
            self._local.discard(name)

    async def set_configs(self, name: str, configs: Mapping[str, str]) -> TopicInfo:
        """Replace the topic's overrides; announced in ``/config/changes`` for Kafka's brokers
        sharing the store (:mod:`strom.metadata.config_changes`; strom's watch the node)."""
        info = self._require(name)
        await self._write_configs(name, configs)
        await config_changes.notify(self._store, f"topics/{name}")
        info.configs = dict(configs)
        self._tell(name, info)
        return info

    async def delete(self, name: str) -> TopicInfo:
        info = self._require(name)
        self._local.add(name)
        try:
            with contextlib.suppress(NoNodeError):
                await self._store.delete(f"{TOPICS_PATH}/{name}", recursive=True)
            with contextlib.suppress(NoNodeError):
                await self._store.delete(f"{CONFIGS_PATH}/{name}")
            self._remove(name)
        finally:
            self._local.discard(name)
        return info

    def _require(self, name: str) -> TopicInfo:
        info = self._topics.get(name)
        if info is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"topic {name!r} does not exist")
        return info

    async def _write_configs(self, name: str, configs: Mapping[str, str]) -> None:
        path = f"{CONFIGS_PATH}/{name}"
        data = config_document(configs)
        try:
            await self._store.set(path, data)
        except NoNodeError:
            try:
                await self._store.create(path, data)
            except NodeExistsError:
                await self._store.set(path, data)

    # --- reads and watches -----------------------------------------------------------------

    async def _read_all(self) -> None:
        while True:
            try:
                names = set(await self._store.children(TOPICS_PATH, watch=self._on_names))
                break
            except NoNodeError:
                # the exists watch fires when the node is made; made meanwhile, it would fire
                # only on a data change, never for its children: read them again instead
                if await self._store.exists(TOPICS_PATH, watch=self._on_names) is None:
                    names = set()
                    break
        for gone in set(self._topics) - names - self._local:
            self._remove(gone)
        # a watched topic is kept current by its own watch: read only the others
        fresh = [n for n in names if n not in self._local and n not in self._watched]
        await asyncio.gather(*(self._read_topic(n) for n in fresh))

    async def _read_topic(self, name: str, watch: bool = True) -> None:
        """Read ``name`` (and its configs) into the view, arming a watch on each node that has
        none (one watch per node at a time: re-reads do not pile them up)."""
        path = f"{TOPICS_PATH}/{name}"
        arm = watch and name not in self._watched
        if arm:
            self._watched.add(name)
        try:
            data, stat = await self._store.get(path, watch=self._on_topic if arm else None)
        except NoNodeError:  # the watch stays armed: it fires if the topic is made again
            if name not in self._local:
                self._remove(name)
            return
        except BaseException:
            if arm:
                self._watched.discard(name)
            raise
        arm = watch and name not in self._cfg_watched
        if arm:
            self._cfg_watched.add(name)
        try:
            cfg_data, _ = await self._store.get(
                f"{CONFIGS_PATH}/{name}", watch=self._on_config if arm else None
            )
            configs = {str(k): str(v) for k, v in json.loads(cfg_data).get("config", {}).items()}
        except NoNodeError:
            configs = {}
        except BaseException:
            if arm:
                self._cfg_watched.discard(name)
            raise
        try:
            topic_id, replicas = parse_topic_document(name, data)
        except (ValueError, KeyError, TypeError) as exc:
            log.error("topic %s: unreadable document %r: %s", name, data[:200], exc)
            return
        if topic_id is None:  # Kafka's version 1: the controller gives it an id
            topic_id = uuid.uuid4()
            info = TopicInfo(name, topic_id, replicas, configs)
            try:
                stat = await self._store.set(path, topic_document(info), stat.version)
            except (BadVersionError, NoNodeError):
                return  # changed meanwhile: its watch re-reads it
        if name in self._local and watch:
            return  # this registry's own write installs it
        self._install(TopicInfo(name, topic_id, replicas, configs, stat.version))

    def _on_names(self, event: WatchEvent) -> None:
        self._background.spawn(self._read_all())

    def _on_topic(self, event: WatchEvent) -> None:
        name = event.path.rsplit("/", 1)[1]
        self._watched.discard(name)
        self._background.spawn(self._read_topic(name))

    def _on_config(self, event: WatchEvent) -> None:
        name = event.path.rsplit("/", 1)[1]
        self._cfg_watched.discard(name)
        if name in self._topics:
            self._background.spawn(self._read_topic(name))

    def _on_session(self, state: SessionState) -> None:
        if state is SessionState.LOST:  # every watch is gone with the session
            self._lost = True
            self._watched.clear()
            self._cfg_watched.clear()
        elif state is SessionState.CONNECTED and self._lost:
            self._lost = False
            self._background.spawn(self._read_all())


__all__ = ["StoreError", "TopicInfo", "TopicRegistry", "validate_topic_name"]
