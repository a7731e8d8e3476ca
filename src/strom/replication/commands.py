"""The controller's commands to a broker, as typed values (no wire entities).

LeaderAndIsr, UpdateMetadata and StopReplica arrive as Kafka requests from a controller
(:mod:`strom.broker.handlers.leader_and_isr` and its siblings translate them) or are made by
a single node for itself (:mod:`strom.replication.local_leadership`); either way they are
applied by :class:`~strom.replication.replica_manager.ReplicaManager` through the same three
methods. Every command carries the sender's controller epoch and the broker epoch it was
meant for, by which it is fenced (STALE_CONTROLLER_EPOCH, STALE_BROKER_EPOCH); -1 for the
broker epoch is not checked, as Kafka does for requests without one.
"""

from __future__ import annotations

from dataclasses import dataclass

from strom.replication.metadata_cache import BrokerInfo, PartitionInfo


@dataclass(frozen=True, slots=True)
class PartitionRole:
    """One partition state of a LeaderAndIsr: the leader (this broker or another), its epoch,
    the ISR and the assignment."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int
    replicas: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class LeaderAndIsr:
    controller_id: int
    controller_epoch: int
    broker_epoch: int
    partitions: tuple[PartitionRole, ...]


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    """One partition state of an UpdateMetadata (:data:`~.metadata_cache.LEADER_DURING_DELETE`
    as the leader removes it from the cache)."""

    topic: str
    partition: int
    state: PartitionInfo


@dataclass(frozen=True, slots=True)
class UpdateMetadata:
    controller_id: int
    controller_epoch: int
    broker_epoch: int
    brokers: tuple[BrokerInfo, ...]  # the live brokers, replacing those known
    partitions: tuple[PartitionMetadata, ...]


@dataclass(frozen=True, slots=True)
class StopPartition:
    topic: str
    partition: int
    leader_epoch: int  # -1 / -2 (deletion): not checked
    delete: bool


@dataclass(frozen=True, slots=True)
class StopReplicas:
    controller_id: int
    controller_epoch: int
    broker_epoch: int
    partitions: tuple[StopPartition, ...]
