"""Topics as request handlers see them: the registry's view, and every change of a topic.

Reads come straight from the :class:`~strom.metadata.topics.TopicRegistry` (its bound
methods: no extra call on the produce and fetch paths). Changes go one of two ways, decided
once, at start-up, by the broker's mode:

- a single node makes and removes the logs itself (:class:`~strom.broker.topic_lifecycle.TopicLifecycle`:
  file work off the loop, all or nothing);
- a cluster member (``zookeeper.connect`` set) writes the assignment to the store and lets the
  controller carry it out (:mod:`strom.controller.admin`), answering once it has.

:meth:`Topics.create` is the one way a broker creates a topic for itself (auto-creation by
Metadata, the internal topics); CreateTopics, CreatePartitions and DeleteTopics use the
finer operations below with their own validation.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from strom.controller import admin
from strom.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from strom.broker.topic_lifecycle import TopicLifecycle
    from strom.metadata.store import MetadataStore
    from strom.metadata.topics import TopicInfo, TopicRegistry


class Topics:
    def __init__(self, registry: TopicRegistry, lifecycle: TopicLifecycle, node_id: int,
                 cluster_store: MetadataStore | None) -> None:  # fmt: skip
        self.registry = registry
        self.lifecycle = lifecycle
        self.node_id = node_id
        #: the store the controller works from, in cluster mode; None on a single node
        self.cluster_store = cluster_store
        self.get = registry.get
        self.by_id = registry.by_id

    def __iter__(self) -> Iterator[TopicInfo]:
        return iter(self.registry)

    def __contains__(self, name: object) -> bool:
        return name in self.registry

    @property
    def cluster(self) -> bool:
        """Whether the controller makes topic changes (cluster mode)."""
        return self.cluster_store is not None

    def busy(self, name: str) -> bool:
        """True while this node is creating, growing or deleting ``name`` itself."""
        return self.lifecycle.busy(name)

    async def create(self, name: str, partitions: int, replication_factor: int,
                     configs: Mapping[str, str]) -> TopicInfo:  # fmt: skip
        """Create a topic and its logs, all or nothing (validation is the caller's); raises
        :class:`KafkaError` (TOPIC_ALREADY_EXISTS, KAFKA_STORAGE_ERROR …). In cluster mode the
        controller creates it (:func:`strom.controller.admin.create_registered`)."""
        if self.cluster_store is not None:
            return await admin.create_registered(self.cluster_store, self.registry, self.node_id,
                                                 name, partitions, replication_factor,
                                                 configs)  # fmt: skip
        return await self.lifecycle.create(name, partitions, configs)

    async def live_brokers(self) -> dict[int, str | None]:
        """The brokers a new topic may be assigned to, with their racks (this one alone on a
        single node)."""
        if self.cluster_store is None:
            return {self.node_id: None}
        return await admin.live_brokers(self.cluster_store)

    async def create_assigned(self, name: str, partitions: int, replication_factor: int,
                              configs: Mapping[str, str], assignment: Mapping[int, list[int]] | None,
                              live: Mapping[int, str | None], timeout: float) -> uuid.UUID:  # fmt: skip
        """CreateTopics: with an explicit assignment or one computed from ``live``; the
        topic id once every partition exists (cluster) or its logs are made (single node,
        where only this broker can hold replicas)."""
        if self.cluster_store is None:
            info = await self.lifecycle.create(name, partitions, configs)
            return info.topic_id
        return await admin.create_topic(self.cluster_store, name, partitions, replication_factor,
                                        configs, assignment, live, timeout)  # fmt: skip

    async def add_partitions(self, name: str, new: Mapping[int, list[int]]) -> TopicInfo:
        """Grow ``name`` by ``new`` (partition -> replicas) on a single node."""
        return await self.lifecycle.add_partitions(name, new)

    async def add_partitions_in_cluster(self, name: str, count: int,
                                        assignment: list[list[int]] | None, timeout: float,
                                        validate_only: bool) -> None:  # fmt: skip
        """CreatePartitions in cluster mode: the controller makes them."""
        store = self._store()
        live = await admin.live_brokers(store)
        await admin.add_partitions(store, name, count, assignment, live, timeout, validate_only)

    async def delete(self, info: TopicInfo) -> None:
        """Delete ``info`` on a single node (logs first, then the registry entry)."""
        await self.lifecycle.delete(info)

    async def delete_in_cluster(self, name: str | None, topic_id: uuid.UUID | None,
                                timeout: float) -> tuple[str, uuid.UUID]:  # fmt: skip
        """DeleteTopics in cluster mode: the controller deletes it."""
        return await admin.delete_topic(self._store(), name, topic_id, timeout)

    def _store(self) -> MetadataStore:
        if self.cluster_store is None:
            raise KafkaError(ErrorCode.unknown_server_error, "not in cluster mode")
        return self.cluster_store
