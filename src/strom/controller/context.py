"""What the controller knows, and the leader elections it makes from it (pure, no I/O).

:class:`ControllerContext` is Kafka's ``ControllerContext``: rebuilt from the store each time
this broker becomes controller, then kept current by the controller's own writes and by the
watches it receives; forgotten at resignation. It holds the live brokers with their epochs
(``Stat.created`` of ``/brokers/ids/<id>``), every topic's assignment (with the reassignment in
flight: ``adding`` / ``removing``, Kafka's topic-znode fields), every partition's state and its
partition epoch (the state node's version), the brokers shutting down and the topics being
deleted.

The election functions are Kafka's ``PartitionLeaderElectionAlgorithms``; each returns the
new leader (or None) and the ISR that goes with it:

* offline: the first replica of the assignment that is live and in the ISR; with unclean
  election enabled, else the first live replica, whose ISR is then just itself;
* reassignment: the first of the target replicas that is live and in the ISR;
* preferred: the first replica of the assignment, if live (its log directory online) and in
  the ISR;
* controlled shutdown: the first live replica in the ISR that is not shutting down; the ISR
  loses the brokers shutting down.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from strom.metadata.topics import uuid_from_kafka, uuid_to_kafka
from strom.metadata.zk_model import BrokerRegistration, PartitionState

TP = tuple[str, int]


@dataclass(slots=True)
class LiveBroker:
    registration: BrokerRegistration
    epoch: int


@dataclass(slots=True)
class TopicDoc:
    """``/brokers/topics/<t>`` in Kafka's version 3 (``topic_id`` in Kafka's base64url form,
    ``adding_replicas`` / ``removing_replicas`` always present), the same document
    :func:`strom.metadata.topics.topic_document` writes; strom's older ``id`` (hex) is still
    read. Unknown keys are kept when the controller rewrites the document (a reassignment)."""

    name: str
    topic_id: uuid.UUID
    assignment: dict[int, list[int]]
    adding: dict[int, list[int]] = field(default_factory=dict)
    removing: dict[int, list[int]] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, name: str, data: bytes) -> TopicDoc:
        doc = json.loads(data)
        raw_id = doc.pop("id", None) or doc.pop("topic_id", None)
        doc.pop("topic_id", None)
        parts = {int(p): [int(b) for b in r] for p, r in doc.pop("partitions", {}).items()}
        adding = {int(p): [int(b) for b in r] for p, r in (doc.pop("adding_replicas", {}) or {}).items()}
        removing = {int(p): [int(b) for b in r]
                    for p, r in (doc.pop("removing_replicas", {}) or {}).items()}  # fmt: skip
        topic_id = uuid_from_kafka(raw_id) if raw_id else uuid.UUID(int=0)
        return cls(name, topic_id, parts, adding, removing, doc)

    def to_json(self) -> bytes:
        doc = dict(self.extra)
        doc["version"] = 3
        doc["partitions"] = {str(p): r for p, r in sorted(self.assignment.items())}
        doc["topic_id"] = uuid_to_kafka(self.topic_id)
        doc["adding_replicas"] = {str(p): r for p, r in sorted(self.adding.items())}
        doc["removing_replicas"] = {str(p): r for p, r in sorted(self.removing.items())}
        return json.dumps(doc).encode()


@dataclass(slots=True)
class LeaderIsr:
    """A partition's state node and its version (the partition epoch)."""

    state: PartitionState
    version: int


@dataclass
class ControllerContext:
    epoch: int = 0
    epoch_version: int = -1
    brokers: dict[int, LiveBroker] = field(default_factory=dict)
    shutting_down: set[int] = field(default_factory=set)
    topics: dict[str, TopicDoc] = field(default_factory=dict)
    states: dict[TP, LeaderIsr] = field(default_factory=dict)
    deleting: set[str] = field(default_factory=set)
    #: topic being deleted -> live replicas that have not answered its StopReplica yet
    deletion_waits: dict[str, set[int]] = field(default_factory=dict)
    #: broker -> its replicas in an offline log directory (answered KAFKA_STORAGE_ERROR to
    #: LeaderAndIsr, Kafka's ``replicasOnOfflineDirs``); forgotten when the broker re-registers
    offline_dirs: dict[int, set[TP]] = field(default_factory=dict)
    #: told of every leader change written (topic, partition, unclean, ms): the broker's
    #: ReplicationMetrics.leader_election, set by the controller service
    on_election: Any = None

    # brokers -------------------------------------------------------------------------------
    def live(self, broker: int) -> bool:
        return broker in self.brokers

    def live_ids(self) -> set[int]:
        return set(self.brokers)

    def replica_online(self, broker: int, tp: TP | None = None) -> bool:
        """The broker is live and (for ``tp``) its replica is not in an offline log dir."""
        if broker not in self.brokers:
            return False
        return tp is None or tp not in self.offline_dirs.get(broker, ())

    def eligible(self, broker: int) -> bool:
        """Live and not shutting down: may lead, may join an ISR."""
        return broker in self.brokers and broker not in self.shutting_down

    # partitions ----------------------------------------------------------------------------
    def replicas(self, tp: TP) -> list[int]:
        topic = self.topics.get(tp[0])
        return list(topic.assignment.get(tp[1], ())) if topic else []

    def partitions(self, topics: Iterable[str] | None = None) -> list[TP]:
        names = self.topics if topics is None else [t for t in topics if t in self.topics]
        return [(t, p) for t in names for p in sorted(self.topics[t].assignment)]

    def led_by(self, broker: int) -> list[TP]:
        return [tp for tp, s in self.states.items() if s.state.leader == broker]

    def hosted_by(self, broker: int) -> list[TP]:
        return [tp for tp in self.partitions() if broker in self.replicas(tp)]

    def offline(self) -> list[TP]:
        """Partitions with a state whose leader is not live (or no leader), not being deleted."""
        return [tp for tp, s in self.states.items()
                if tp[0] not in self.deleting and not self.replica_online(s.state.leader, tp)]  # fmt: skip

    def offline_replicas(self, tp: TP) -> list[int]:
        return [b for b in self.replicas(tp) if not self.replica_online(b, tp)]


# elections (Kafka's PartitionLeaderElectionAlgorithms) ----------------------------------------
Elected = tuple[int, tuple[int, ...]] | None


def offline_election(ctx: ControllerContext, assignment: Sequence[int], isr: Sequence[int],
                     unclean: bool, tp: TP | None = None) -> Elected:  # fmt: skip
    """``tp``: replicas of it in an offline log directory are not candidates either."""
    for broker in assignment:
        if ctx.replica_online(broker, tp) and broker in isr:
            return broker, tuple(b for b in isr if ctx.replica_online(b, tp))
    if unclean:
        for broker in assignment:
            if ctx.replica_online(broker, tp):
                return broker, (broker,)
    return None


def reassignment_election(ctx: ControllerContext, target: Sequence[int],
                          isr: Sequence[int]) -> Elected:  # fmt: skip
    for broker in target:
        if ctx.live(broker) and broker in isr:
            return broker, tuple(isr)
    return None


def preferred_election(ctx: ControllerContext, assignment: Sequence[int],
                       isr: Sequence[int], tp: TP | None = None) -> Elected:  # fmt: skip
    """``tp``: a preferred replica in an offline log directory is not elected (Kafka's
    ``isReplicaOnline``): it would refuse the leadership with KAFKA_STORAGE_ERROR."""
    if assignment and ctx.replica_online(assignment[0], tp) and assignment[0] in isr:
        return assignment[0], tuple(isr)
    return None


def shutdown_election(ctx: ControllerContext, assignment: Sequence[int],
                      isr: Sequence[int]) -> Elected:  # fmt: skip
    for broker in assignment:
        if ctx.eligible(broker) and broker in isr:
            return broker, tuple(b for b in isr if b not in ctx.shutting_down)
    return None
