"""Topics as the cluster knows them: id, partition assignment, config overrides.

Stored in the metadata store under Kafka's classic ZooKeeper paths:

- ``/brokers/topics/<name>``: ``{"id": "<uuid>", "partitions": {"0": [1], ...}}`` (replicas
  per partition, the first being the preferred leader);
- ``/config/topics/<name>``: ``{"config": {"retention.ms": "1000", ...}}`` (overrides only).

:class:`TopicRegistry` validates names and keeps an in-memory view; it does not touch logs.
"""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from strom.metadata.store import NoNodeError, SyncMetadataStore
from strom.protocol.errors import ErrorCode, KafkaError

TOPICS_PATH = "/brokers/topics"
CONFIGS_PATH = "/config/topics"
MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


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


@dataclass
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    replicas: dict[int, list[int]]
    configs: dict[str, str] = field(default_factory=dict)

    @property
    def partition_count(self) -> int:
        return len(self.replicas)

    @property
    def is_internal(self) -> bool:
        return self.name in INTERNAL_TOPICS


class TopicRegistry:
    """Create, alter, delete and look up topics in a :class:`SyncMetadataStore`."""

    def __init__(self, store: SyncMetadataStore) -> None:
        self._store = store
        self._topics: dict[str, TopicInfo] = {}
        self._by_id: dict[uuid.UUID, TopicInfo] = {}
        self.reload()

    def reload(self) -> None:
        self._topics.clear()
        self._by_id.clear()
        try:
            names = self._store.children(TOPICS_PATH)
        except NoNodeError:
            names = []
        for name in names:
            data, _ = self._store.get(f"{TOPICS_PATH}/{name}")
            doc = json.loads(data)
            try:
                cfg = json.loads(self._store.get(f"{CONFIGS_PATH}/{name}")[0])["config"]
            except NoNodeError:
                cfg = {}
            info = TopicInfo(
                name,
                uuid.UUID(doc["id"]),
                {int(p): list(r) for p, r in doc["partitions"].items()},
                dict(cfg),
            )
            self._topics[name] = info
            self._by_id[info.topic_id] = info

    def get(self, name: str) -> TopicInfo | None:
        return self._topics.get(name)

    def by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self._by_id.get(topic_id)

    def __iter__(self) -> Iterator[TopicInfo]:
        return iter(list(self._topics.values()))

    def __contains__(self, name: object) -> bool:
        return name in self._topics

    def create(
        self, name: str, replicas: Mapping[int, list[int]], configs: Mapping[str, str],
        topic_id: uuid.UUID | None = None,
    ) -> TopicInfo:
        """``topic_id``: the id the controller gave it (a new one when None)."""
        validate_topic_name(name)
        if name in self._topics:
            raise KafkaError(ErrorCode.topic_already_exists, f"topic {name!r} already exists")
        info = TopicInfo(name, topic_id or uuid.uuid4(), {p: list(r) for p, r in replicas.items()}, dict(configs))
        # Configs first: a crash between the two writes leaves an orphan config, never a topic
        # created with the wrong settings.
        self._write_configs(name, info.configs)
        self._store.create(f"{TOPICS_PATH}/{name}", self._topic_doc(info))
        self._topics[name] = info
        self._by_id[info.topic_id] = info
        return info

    def add_partitions(self, name: str, replicas: Mapping[int, list[int]]) -> TopicInfo:
        info = self._require(name)
        info.replicas.update({p: list(r) for p, r in replicas.items()})
        self._store.set(f"{TOPICS_PATH}/{name}", self._topic_doc(info))
        return info

    def set_configs(self, name: str, configs: Mapping[str, str]) -> TopicInfo:
        info = self._require(name)
        info.configs = dict(configs)
        self._write_configs(name, info.configs)
        return info

    def delete(self, name: str) -> TopicInfo:
        info = self._require(name)
        self._store.delete(f"{TOPICS_PATH}/{name}")
        with contextlib.suppress(NoNodeError):
            self._store.delete(f"{CONFIGS_PATH}/{name}")
        del self._topics[name]
        self._by_id.pop(info.topic_id, None)
        return info

    def _require(self, name: str) -> TopicInfo:
        info = self._topics.get(name)
        if info is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"topic {name!r} does not exist")
        return info

    def _write_configs(self, name: str, configs: Mapping[str, str]) -> None:
        path = f"{CONFIGS_PATH}/{name}"
        data = json.dumps({"config": dict(configs)}, sort_keys=True).encode()
        if self._store.exists(path) is None:
            self._store.create(path, data)
        else:
            self._store.set(path, data)

    @staticmethod
    def _topic_doc(info: TopicInfo) -> bytes:
        doc = {
            "id": str(info.topic_id),
            "partitions": {str(p): r for p, r in sorted(info.replicas.items())},
        }
        return json.dumps(doc).encode()
