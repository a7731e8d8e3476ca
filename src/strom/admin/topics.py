"""Topics: names, listings, descriptions, configs, creation and changes, trimming.

Results are frozen dataclasses whose fields are the names (and the order) of the CLI's JSON
output; :func:`dataclasses.asdict` of one is that row. Every failure is an
:class:`~strom.admin.errors.AdminError` naming the topic.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from confluent_kafka import TopicCollection
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
)

from strom.admin import log_dirs
from strom.admin.errors import InvalidInputError, NotFoundError
from strom.admin.offsets import Key, Position, end_offsets, log_starts, resolve
from strom.admin.session import Session

_LEGAL_NAME = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_NAME_LENGTH = 249


def validate_topic_name(name: str) -> None:
    """Kafka's rule for legal topic names, checked before asking the broker."""
    if not name or name in (".", ".."):
        raise InvalidInputError(f"invalid topic name {name!r}: must not be empty, '.' or '..'")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidInputError(f"invalid topic name: longer than {MAX_NAME_LENGTH} characters")
    if not _LEGAL_NAME.match(name):
        raise InvalidInputError(
            f"invalid topic name {name!r}: only ASCII letters, digits, '.', '_' and '-' allowed"
        )


def is_internal(name: str) -> bool:
    """Kafka's internal topics (``__consumer_offsets``, ``__transaction_state``) and the
    convention of a ``__`` prefix for other tools' internal topics."""
    return name.startswith("__")


def parse_settings(items: list[str], what: str = "config") -> dict[str, str]:
    """``k=v`` strings to a dict; a missing ``=`` is an :class:`InvalidInputError`."""
    result: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidInputError(f"invalid {what} {item!r}: expected KEY=VALUE")
        result[key] = value
    return result


# -- results ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class TopicListing:
    name: str
    partitions: int
    replicas: int
    internal: bool


@dataclass(frozen=True)
class PartitionState:
    """One partition's leader (-1: none), replicas and in-sync replicas (broker ids)."""

    partition: int
    leader: int
    replicas: list[int]
    isr: list[int]


@dataclass(frozen=True)
class TopicDescription:
    name: str
    topic_id: str
    internal: bool
    partition_count: int
    replication_factor: int
    partitions: list[PartitionState]


@dataclass(frozen=True)
class TopicConfig:
    topic: str
    key: str
    value: str | None  # None: unset, or sensitive
    source: str  # Kafka's name: DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG ...
    is_default: bool
    read_only: bool


@dataclass(frozen=True)
class PartitionOffsets:
    """A partition with its log start and end offsets, the messages between them, and its
    log's size in bytes on its leader (-1: unknown, see :mod:`strom.admin.log_dirs`)."""

    topic: str
    partition: int
    leader: int
    replicas: list[int]
    isr: list[int]
    log_start_offset: int
    log_end_offset: int
    messages: int
    size: int


# -- reading ---------------------------------------------------------------------------------


def list_topics(session: Session, internal: bool = False) -> list[TopicListing]:
    """Every topic (internal ones with ``internal``), by name."""
    topics = session.metadata().topics
    return [
        TopicListing(
            name=n,
            partitions=len(topics[n].partitions),
            replicas=len(next(iter(topics[n].partitions.values())).replicas)
            if topics[n].partitions else 0,
            internal=is_internal(n),
        )
        for n in sorted(n for n in topics if internal or not is_internal(n))
    ]


def all_topic_names(session: Session) -> list[str]:
    """Every topic's name, internal ones too, as kafka-topics.sh lists them."""
    return sorted(session.metadata().topics)


def partition_count(session: Session, name: str, what: str) -> list[int]:
    """The partition ids of topic ``name``; :class:`NotFoundError` ``what: topic ... does not
    exist`` when it has none."""
    topic_md = session.metadata(name).topics.get(name)
    if topic_md is None or topic_md.error is not None:
        raise NotFoundError(f"{what}: topic {name!r} does not exist")
    return sorted(topic_md.partitions)


def _kafka_uuid(topic_id: Any) -> str:
    """Kafka prints topic ids as URL-safe base64 without padding."""
    if topic_id is None:
        return "-"
    return str(topic_id).replace("+", "-").replace("/", "_").rstrip("=")


def config_source_name(source: Any) -> str:
    """Kafka's name of a config source (the client hands out the enum or its number)."""
    try:
        return ConfigSource(source).name
    except ValueError:
        return str(source)


def describe_topics(session: Session, names: list[str]) -> list[TopicDescription]:
    """Each topic's partitions with leader, replicas and ISR (DescribeTopics)."""
    futures = session.admin.describe_topics(TopicCollection(names),
                                            request_timeout=session.timeout)  # fmt: skip
    documents = []
    for name in names:
        desc = session.wait(futures[name], f"cannot describe topic {name!r}")
        parts = sorted(desc.partitions, key=lambda p: p.id)
        documents.append(TopicDescription(
            name=name,
            topic_id=_kafka_uuid(desc.topic_id),
            internal=bool(getattr(desc, "is_internal", False)),
            partition_count=len(parts),
            replication_factor=len(parts[0].replicas) if parts else 0,
            partitions=[
                PartitionState(
                    partition=p.id,
                    leader=p.leader.id if p.leader is not None else -1,
                    replicas=[n.id for n in p.replicas],
                    isr=[n.id for n in p.isr],
                )
                for p in parts
            ],
        ))  # fmt: skip
    return documents


def topic_configs(session: Session, name: str) -> list[TopicConfig]:
    """Every config of topic ``name`` with its value and source (sensitive values None)."""
    resource = ConfigResource(ConfigResource.Type.TOPIC, name)
    futures = session.admin.describe_configs([resource], request_timeout=session.timeout)
    entries = session.wait(futures[resource], f"cannot describe configs of {name!r}")
    return [
        TopicConfig(
            topic=name,
            key=key,
            value=None if entry.is_sensitive else entry.value,
            source=config_source_name(entry.source),
            is_default=bool(entry.is_default),
            read_only=bool(entry.is_read_only),
        )
        for key, entry in sorted(entries.items())
    ]


def overrides(configs: list[TopicConfig]) -> dict[str, str]:
    """The configs set on the topic itself (not defaults), as kafka-topics.sh's ``Configs:``."""
    return {c.key: c.value for c in configs if not c.is_default and c.value is not None}


def partition_offsets(session: Session, docs: list[TopicDescription]) -> list[PartitionOffsets]:
    """Every partition of ``docs`` with its offsets and size on its leader."""
    keys = [(d.name, p.partition) for d in docs for p in d.partitions]
    start = log_starts(session, keys)
    end = end_offsets(session, keys)
    sizes = log_dirs.leader_partition_sizes(session.metadata(), keys, session.timeout)
    return [
        PartitionOffsets(
            topic=d.name, partition=p.partition, leader=p.leader, replicas=p.replicas,
            isr=p.isr, log_start_offset=start[(d.name, p.partition)],
            log_end_offset=end[(d.name, p.partition)],
            messages=end[(d.name, p.partition)] - start[(d.name, p.partition)],
            size=sizes.get((d.name, p.partition), -1),
        )
        for d in docs for p in d.partitions
    ]  # fmt: skip


def min_isr(configs: list[TopicConfig], topic: str) -> int:
    """The topic's ``min.insync.replicas`` from its described configs (Kafka's default 1)."""
    for c in configs:
        if c.topic == topic and c.key == "min.insync.replicas" and c.value is not None:
            return int(c.value)
    return 1


#: The partition problems kafka-topics.sh filters on, with what each means.
PROBLEMS = {
    "under-replicated-partitions": "only partitions whose ISR is smaller than their replicas",
    "under-min-isr-partitions": "only partitions whose ISR is below min.insync.replicas",
    "unavailable-partitions": "only partitions without a leader",
}


def partition_problems(partition: PartitionState, minimum: int) -> list[str]:
    """The problem names (:data:`PROBLEMS` keys) a partition has; empty when it is healthy."""
    problems = []
    if partition.leader < 0:
        problems.append("unavailable-partitions")
    if len(partition.isr) < len(partition.replicas):
        problems.append("under-replicated-partitions")
    if len(partition.isr) < minimum:
        problems.append("under-min-isr-partitions")
    return problems


def problem_partitions(session: Session, names: list[str], wanted: list[str]
                       ) -> list[tuple[str, PartitionState]]:  # fmt: skip
    """(topic, partition) of ``names`` with one of the ``wanted`` problems."""
    docs = describe_topics(session, names)
    configs: list[TopicConfig] = []
    if "under-min-isr-partitions" in wanted:
        configs = [row for d in docs for row in topic_configs(session, d.name)]
    return [(d.name, p) for d in docs for p in d.partitions
            if set(partition_problems(p, min_isr(configs, d.name))) & set(wanted)]  # fmt: skip


# -- changing --------------------------------------------------------------------------------


def create_topic(session: Session, name: str, partitions: int = -1, replication_factor: int = -1,
                 configs: dict[str, str] | None = None, partitions_flag: str = "--partitions"
                 ) -> None:  # fmt: skip
    """Create one topic (-1: the broker's default partitions / replication factor)."""
    validate_topic_name(name)
    if partitions == 0 or partitions < -1:
        raise InvalidInputError(f"{partitions_flag} must be at least 1")
    new = NewTopic(name, num_partitions=partitions, replication_factor=replication_factor,
                   config=dict(configs or {}))  # fmt: skip
    futures = session.admin.create_topics([new], request_timeout=session.timeout)
    session.wait(futures[name], f"cannot create topic {name!r}")


def delete_topics(session: Session, names: list[str]) -> None:
    """Delete topics (stops at the first refused, naming it)."""
    futures = session.admin.delete_topics(names, request_timeout=session.timeout)
    for name in names:
        session.wait(futures[name], f"cannot delete topic {name!r}")


def alter_topic_configs(session: Session, name: str, settings: dict[str, str],
                        deletes: list[str], what: str | None = None) -> None:  # fmt: skip
    """Incrementally set ``settings`` and remove ``deletes`` (back to the default)."""
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
               for k, v in settings.items()]  # fmt: skip
    entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE)
                for k in deletes]  # fmt: skip
    resource = ConfigResource(ConfigResource.Type.TOPIC, name, incremental_configs=entries)
    futures = session.admin.incremental_alter_configs([resource],
                                                      request_timeout=session.timeout)
    for future in futures.values():
        session.wait(future, what or f"cannot alter configs of {name!r}")


def add_partitions(session: Session, name: str, *, num: int | None = None,
                   total: int | None = None) -> tuple[int, int]:  # fmt: skip
    """Grow topic ``name`` by ``num`` partitions or to ``total``; (before, after)."""
    current = len(partition_count(session, name, "cannot add partitions"))
    target = current + num if num is not None else total
    if target is None or target <= current:
        raise InvalidInputError(
            f"topic {name!r} has {current} partition(s); the new count must be larger"
        )
    futures = session.admin.create_partitions([NewPartitions(name, target)],
                                              request_timeout=session.timeout)  # fmt: skip
    session.wait(futures[name], f"cannot add partitions to {name!r}")
    return current, target


@dataclass(frozen=True)
class TrimRow:
    """A partition's log start before and after a trim (DeleteRecords)."""

    topic: str
    partition: int
    log_start_offset: int
    new_log_start_offset: int


def trim_plan(session: Session, name: str, position: Position,
              partitions: list[int] | None = None) -> list[TrimRow]:  # fmt: skip
    """Where each partition's log would start after deleting the records before ``position``
    (clamped to the log; ``start`` deletes nothing and is refused)."""
    parts = partition_count(session, name, "cannot trim")
    for p in partitions or []:
        if p not in parts:
            raise NotFoundError(f"topic {name!r} has no partition {p}")
    keys: list[Key] = [(name, p) for p in (sorted(set(partitions)) if partitions else parts)]
    if position.kind == "start":
        raise InvalidInputError("--offset start deletes nothing: give N, end, -N or @TIME")
    targets = resolve(session, keys, position)
    return [TrimRow(t, p, start, new) for (t, p), (start, _end, new) in targets.items()]


def trim(session: Session, plan: list[TrimRow]) -> list[TrimRow]:
    """Delete the records before each row's new log start (DeleteRecords); the rows with the
    log start the broker reports afterwards."""
    request = [KafkaTopicPartition(r.topic, r.partition, r.new_log_start_offset)
               for r in plan if r.new_log_start_offset > r.log_start_offset]  # fmt: skip
    futures = (session.admin.delete_records(request, request_timeout=session.timeout)
               if request else {})  # fmt: skip
    done: dict[Key, int] = {}
    for tp, future in futures.items():
        result = session.wait(future, f"cannot trim {tp.topic}-{tp.partition}")
        done[(tp.topic, tp.partition)] = result.low_watermark
    return [TrimRow(r.topic, r.partition, r.log_start_offset,
                    done.get((r.topic, r.partition), r.new_log_start_offset))
            for r in plan]  # fmt: skip
