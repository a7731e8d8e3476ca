"""What the consumer-group coordinator needs to know of topics (a port, sans-IO).

KIP-848 assignments name topics by id, regex subscriptions match topic names, and rack-aware
assignment needs the racks of each partition's replicas. The broker implements
:class:`TopicsView` over its topic registry and metadata cache
(:class:`strom.broker.group.service.RegistryTopics`); unit tests use :class:`StaticTopics`.
``version`` grows whenever a topic is created, grows or is deleted, so the coordinator knows
when a group's subscribed topics must be looked at again.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class TopicMeta:
    name: str
    topic_id: uuid.UUID
    partitions: int
    #: per partition, the racks of its replicas (empty: unknown)
    racks: tuple[frozenset[str], ...] = ()


class TopicsView(Protocol):
    @property
    def version(self) -> int: ...

    def get(self, name: str) -> TopicMeta | None: ...

    def by_id(self, topic_id: uuid.UUID) -> TopicMeta | None: ...

    def names(self) -> Iterable[str]:
        """The topics a subscription regex may match (internal topics left out)."""
        ...


class StaticTopics:
    """A :class:`TopicsView` over topics set by hand (tests, a coordinator without a broker);
    :meth:`put` and :meth:`remove` bump the version."""

    def __init__(self, topics: Mapping[str, TopicMeta] | None = None) -> None:
        self._topics = dict(topics or {})
        self._version = 0

    @property
    def version(self) -> int:
        return self._version

    def put(self, meta: TopicMeta) -> None:
        self._topics[meta.name] = meta
        self._version += 1

    def remove(self, name: str) -> None:
        self._topics.pop(name, None)
        self._version += 1

    def get(self, name: str) -> TopicMeta | None:
        return self._topics.get(name)

    def by_id(self, topic_id: uuid.UUID) -> TopicMeta | None:
        return next((t for t in self._topics.values() if t.topic_id == topic_id), None)

    def names(self) -> Iterable[str]:
        return [n for n in self._topics if not n.startswith("__")]
