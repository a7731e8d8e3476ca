"""The cluster as a whole: its brokers and controller, its health, leader elections.

:func:`describe_cluster` is DescribeCluster with the topic count from Metadata. No Kafka
client API carries the controller epoch (it lives in ZooKeeper's ``/controller_epoch``, as
kafka-zookeeper tools read it): :func:`controller_epoch` reads it, read-only, from a ZooKeeper
the caller names.

:func:`health` classifies every partition as rpk's ``cluster health`` does: *offline* (no
leader), *under min ISR* (fewer in sync than the topic's ``min.insync.replicas``: ``acks=all``
writes are refused) and *under-replicated* (fewer in sync than replicas). Any of them makes
the cluster unhealthy; the report counts them per topic, with the internal topics folded
together, so one broker down is a few lines however many partitions it held.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import ElectionType, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import ConfigResource

from strom.admin.errors import InvalidInputError, NotFoundError, TimedOutError, describe_kafka_error
from strom.admin.session import Session
from strom.admin.topics import is_internal
from strom.metadata.zk_model import CONTROLLER_EPOCH_PATH, controller_epoch_from_bytes

ELECTION_NOT_NEEDED = 84


@dataclass(frozen=True)
class Broker:
    id: int
    host: str
    port: int
    rack: str | None


@dataclass(frozen=True)
class ClusterDescription:
    cluster_id: str | None
    controller: int
    brokers: list[Broker]  # by id
    topics: int  # how many topics Metadata lists, internal ones too

    def addresses(self) -> set[str]:
        return {f"{b.host}:{b.port}" for b in self.brokers}


def describe_cluster(session: Session) -> ClusterDescription:
    """Cluster id, controller and brokers (DescribeCluster), topic count (Metadata)."""
    md = session.metadata()
    desc = session.wait(session.admin.describe_cluster(request_timeout=session.timeout),
                        "cannot describe the cluster")  # fmt: skip
    controller = desc.controller.id if desc.controller is not None else md.controller_id
    brokers = sorted((Broker(n.id, n.host, n.port, n.rack) for n in desc.nodes),
                     key=lambda b: b.id)  # fmt: skip
    return ClusterDescription(desc.cluster_id or md.cluster_id, controller, brokers,
                              len(md.topics))  # fmt: skip


def controller_epoch(connect: str, timeout: float) -> int | None:
    """``/controller_epoch`` read from the ZooKeeper at ``connect`` (None if no controller was
    ever elected); a :class:`TimedOutError` if it does not answer within ``timeout``."""
    from kazoo.client import KazooClient  # only this call needs kazoo
    from kazoo.exceptions import NoNodeError
    from kazoo.handlers.threading import KazooTimeoutError

    logging.getLogger("kazoo").setLevel(logging.CRITICAL)  # its retries are not the user's
    zk = KazooClient(hosts=connect, timeout=timeout, read_only=True)
    try:
        zk.start(timeout=timeout)
    except KazooTimeoutError:
        zk.close()
        raise TimedOutError(f"cannot reach ZooKeeper at {connect} within {timeout:g} s") from None
    try:
        data, _stat = zk.get(CONTROLLER_EPOCH_PATH)
        return controller_epoch_from_bytes(data)
    except NoNodeError:
        return None
    finally:
        zk.stop()
        zk.close()


def min_insync_replicas(session: Session, topics: list[str]) -> dict[str, int]:
    """Each topic's ``min.insync.replicas`` (one DescribeConfigs; 1 where unknown)."""
    result = dict.fromkeys(topics, 1)
    if not topics:
        return result
    resources = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in topics]
    futures = session.admin.describe_configs(resources, request_timeout=session.timeout)
    for resource, future in futures.items():
        try:
            entry = future.result(timeout=session.timeout + 1).get("min.insync.replicas")
        except Exception:  # noqa: BLE001 - a topic deleted meanwhile: nothing to check
            continue
        if entry is not None and entry.value is not None:
            result[resource.name] = int(entry.value)
    return result


#: The kinds of unhealthy partition, worst first, with the name a report gives each.
PROBLEM_KINDS = {
    "offline": "offline partitions",
    "under_min_isr": "under-min-ISR partitions",
    "under_replicated": "under-replicated partitions",
}


@dataclass(frozen=True)
class PartitionProblem:
    """One unhealthy partition: ``kind`` a :data:`PROBLEM_KINDS` key (its worst problem)."""

    topic: str
    partition: int
    kind: str
    leader: int
    replicas: list[int]
    isr: list[int]
    min_isr: int

    @property
    def label(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True)
class HealthReport:
    controller: int
    brokers: list[int]  # live
    brokers_down: list[int]  # named as replicas, not live
    partitions: int
    problems: list[PartitionProblem] = field(default_factory=list)

    def of_kind(self, kind: str) -> list[PartitionProblem]:
        return [p for p in self.problems if p.kind == kind]

    @property
    def healthy(self) -> bool:
        return not self.problems and not self.brokers_down

    @property
    def reasons(self) -> list[str]:
        """Why it is not healthy (empty when it is)."""
        found = [name for kind, name in PROBLEM_KINDS.items() if self.of_kind(kind)]
        return (["brokers down"] if self.brokers_down else []) + found


def health(session: Session) -> HealthReport:
    """Every partition classified (see the module docstring)."""
    md = session.metadata()
    minimum = min_insync_replicas(session, sorted(md.topics))
    problems = []
    named: set[int] = set()
    count = 0
    for name, topic in sorted(md.topics.items()):
        for pid, part in sorted(topic.partitions.items()):
            count += 1
            named.update(part.replicas)
            if part.leader < 0:
                kind = "offline"
            elif len(part.isrs) < minimum[name]:
                kind = "under_min_isr"
            elif len(part.isrs) < len(part.replicas):
                kind = "under_replicated"
            else:
                continue
            problems.append(PartitionProblem(name, pid, kind, part.leader, list(part.replicas),
                                             list(part.isrs), minimum[name]))  # fmt: skip
    return HealthReport(md.controller_id, sorted(md.brokers), sorted(named - set(md.brokers)),
                        count, problems)  # fmt: skip


def fold_by_topic(problems: list[PartitionProblem]) -> list[tuple[str, list[int]]]:
    """(topic, its partitions) for the user topics, then ("internal topics", ...) holding the
    partitions of every internal topic together (their ids are not worth listing)."""
    user: dict[str, list[int]] = {}
    internal: list[int] = []
    for p in problems:
        if is_internal(p.topic):
            internal.append(p.partition)
        else:
            user.setdefault(p.topic, []).append(p.partition)
    folded = sorted(user.items())
    if internal:
        folded.append(("internal topics", internal))
    return folded


@dataclass(frozen=True)
class ElectionResult:
    election_type: str  # PREFERRED or UNCLEAN
    elected: list[str]  # topic-partition
    not_needed: list[str]
    failed: list[tuple[str, str]]  # (topic-partition, why)


def _error_code(err: Any) -> int:
    if isinstance(err, KafkaException) and err.args and isinstance(err.args[0], KafkaError):
        return int(err.args[0].code())
    if isinstance(err, KafkaError):
        return int(err.code())
    return -1


def elect_leaders(session: Session, unclean: bool = False, topic: str | None = None,
                  partition: int | None = None) -> ElectionResult:  # fmt: skip
    """ElectLeaders (through the controller) for ``topic``'s partitions (only ``partition``
    if given), or for every partition; each partition's outcome (ELECTION_NOT_NEEDED is not a
    failure)."""
    if partition is not None and topic is None:
        raise InvalidInputError("--partition needs --topic")
    election = ElectionType.UNCLEAN if unclean else ElectionType.PREFERRED
    partitions: list[TopicPartition] | None = None
    if topic is not None:
        topic_md = session.metadata(topic).topics.get(topic)
        if topic_md is None or topic_md.error is not None or not topic_md.partitions:
            raise NotFoundError(f"topic {topic!r} does not exist")
        if partition is not None and partition not in topic_md.partitions:
            raise NotFoundError(f"topic {topic!r} has no partition {partition}")
        ids = [partition] if partition is not None else sorted(topic_md.partitions)
        partitions = [TopicPartition(topic, i) for i in ids]
    # No request_timeout/operation_timeout: confluent-kafka 2.16's elect_leaders refuses both
    # (a SystemError in its C argument parsing); Session.wait bounds the wait instead.
    future = session.admin.elect_leaders(election, partitions)
    results = session.wait(future, "leader election failed")
    done, not_needed, failed = [], [], []
    for tp, err in sorted(results.items(), key=lambda kv: (kv[0].topic, kv[0].partition)):
        label = f"{tp.topic}-{tp.partition}"
        if err is None:
            done.append(label)
        elif _error_code(err) == ELECTION_NOT_NEEDED:
            not_needed.append(label)
        else:
            failed.append((label, describe_kafka_error(err)))
    return ElectionResult(election.name, done, not_needed, failed)
