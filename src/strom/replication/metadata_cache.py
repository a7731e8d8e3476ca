"""What this broker knows of the cluster: live brokers, the controller, partition states.

Filled by the controller's UpdateMetadata (:meth:`ReplicaManager.apply_update_metadata
<strom.replication.replica_manager.ReplicaManager.apply_update_metadata>`; a single node feeds
itself the same command, :mod:`strom.replication.local_leadership`), as
Kafka's ZooKeeper-mode ``MetadataCache``. Metadata, FindCoordinator and DescribeCluster answer
from it; a leader finds the controller here to send AlterPartition.

Invariants: an UpdateMetadata replaces the live brokers and the controller id wholesale and
updates (never removes) the partition states it names, except a partition whose leader is
:data:`LEADER_DURING_DELETE` (-2), which Kafka's controller sends for a topic being deleted:
that partition is removed. :attr:`version` grows with every change, so answers built from the
cache (the Metadata handler's cached entries) know when to rebuild. :meth:`wait_filled` lets a
cluster member's client-facing answers wait for the controller's first UpdateMetadata: before
it the cache knows no controller (-1), and librdkafka, told so, waits for a controller without
asking again, so an admin request through a broker that had just started never completes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from dataclasses import dataclass, field

LEADER_DURING_DELETE = -2
NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A live broker. ``host``/``port``: where peers reach it (its registration's first
    endpoint, the inter-broker listener); ``listeners``: every advertised listener as (name,
    host, port), empty for a broker known only by one address (then it answers on all)."""

    node_id: int
    host: str
    port: int
    rack: str | None = None
    listeners: tuple[tuple[str, str, int], ...] = ()

    def on(self, listener: str) -> BrokerInfo | None:
        """This broker as clients of ``listener`` reach it; None when it has no such listener
        (Kafka leaves it out of their answers). ``""`` (a local call) is the peers' address."""
        if not listener or not self.listeners:
            return self
        for name, host, port in self.listeners:
            if name == listener:
                if host == self.host and port == self.port:
                    return self
                return BrokerInfo(self.node_id, host, port, self.rack, self.listeners)
        return None


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """A partition's state as the controller last told it (leader -1: offline)."""

    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    partition_epoch: int = 0
    offline: tuple[int, ...] = ()


@dataclass
class MetadataCache:
    node_id: int
    controller_id: int = -1
    controller_epoch: int = -1
    brokers: dict[int, BrokerInfo] = field(default_factory=dict)
    partitions: dict[tuple[str, int], PartitionInfo] = field(default_factory=dict)
    version: int = 0
    _filled: asyncio.Event = field(default_factory=asyncio.Event, repr=False, compare=False)

    @property
    def filled(self) -> bool:
        """Whether an UpdateMetadata was applied (the controller and live brokers are known)."""
        return self._filled.is_set()

    async def wait_filled(self, timeout: float) -> bool:
        """Wait (at most ``timeout`` s) for the first UpdateMetadata; whether it came."""
        if not self._filled.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._filled.wait(), timeout)
        return self._filled.is_set()

    def partition(self, topic: str, index: int) -> PartitionInfo | None:
        return self.partitions.get((topic, index))

    def broker(self, node_id: int) -> BrokerInfo | None:
        return self.brokers.get(node_id)

    def broker_on(self, node_id: int, listener: str) -> BrokerInfo | None:
        """``node_id`` as clients of ``listener`` reach it (None: dead or not on it)."""
        found = self.brokers.get(node_id)
        return found.on(listener) if found is not None else None

    def brokers_on(self, listener: str) -> list[BrokerInfo]:
        """The live brokers as clients of ``listener`` reach them, by id."""
        found = (b.on(listener) for b in self.brokers.values())
        return sorted((b for b in found if b is not None), key=lambda b: b.node_id)

    def alive(self, node_id: int) -> bool:
        return node_id in self.brokers

    def set_partition(self, topic: str, index: int, info: PartitionInfo | None) -> None:
        if info is None or info.leader == LEADER_DURING_DELETE:
            self.partitions.pop((topic, index), None)
        else:
            self.partitions[(topic, index)] = info
        self.version += 1

    def remove_topic(self, topic: str, partitions: Iterable[int]) -> None:
        for index in partitions:
            self.partitions.pop((topic, index), None)
        self.version += 1

    def apply(self, controller_id: int, controller_epoch: int, brokers: Iterable[BrokerInfo],
              partitions: Iterable[tuple[str, int, PartitionInfo]]) -> None:  # fmt: skip
        """Apply an UpdateMetadata: the live brokers and the controller replace those known,
        the partition states named are set (fencing is the replica manager's job)."""
        self.brokers = {b.node_id: b for b in brokers}
        self.controller_id = controller_id
        self.controller_epoch = max(self.controller_epoch, controller_epoch)
        for topic, index, info in partitions:
            key = (topic, index)
            if info.leader == LEADER_DURING_DELETE:
                self.partitions.pop(key, None)
            else:
                self.partitions[key] = info
        self.version += 1
        self._filled.set()
