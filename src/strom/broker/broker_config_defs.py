"""The broker configs strom knows: Kafka's names, types, defaults, docs, and which are dynamic.

What DescribeConfigs lists for a BROKER resource and what AlterConfigs may change. A config is
*dynamic* when Kafka's ``DynamicBrokerConfig`` lets it change without a restart **and** strom
applies it live; those are the broker synonyms of the topic configs (``log.retention.ms``,
``log.segment.bytes``, ``log.cleaner.delete.retention.ms``, ``message.max.bytes`` …, see
:data:`strom.storage.log_config.TOPIC_CONFIGS`) and their coarser-unit synonyms
(``log.retention.hours`` …). Everything else is read-only: changing it takes a restart.
Kafka reads synonyms in order, first one set wins: ``log.retention.ms`` before
``log.retention.minutes`` before ``log.retention.hours``.

Types are Kafka's ``ConfigDef.Type`` as DescribeConfigs v3+ reports them (``config_type``).
"""

from __future__ import annotations

from typing import NamedTuple

from strom.config import BROKER_DEFAULTS
from strom.storage.log_config import TOPIC_CONFIGS

# DescribeConfigsResponse.ConfigType ids
TYPE_IDS = {
    "boolean": 1, "string": 2, "int": 3, "short": 4, "long": 5, "double": 6, "list": 7,
    "class": 8, "password": 9,
}  # fmt: skip


class BrokerConfigDef(NamedTuple):
    type: str
    default: str | None  # Kafka's default as a string; None when Kafka has none
    doc: str
    dynamic: bool = False


_B = BrokerConfigDef
_STATIC: dict[str, BrokerConfigDef] = {
    "advertised.listeners": _B("string", None,
        "listeners published to clients, if different from listeners"),
    "auto.create.topics.enable": _B("boolean", "true", "create a topic on first metadata request"),
    "auto.leader.rebalance.enable": _B("boolean", "true",
        "the controller moves leadership back to preferred replicas periodically"),
    "leader.imbalance.check.interval.seconds": _B("long", "300",
        "how often the controller checks the preferred-leader balance"),
    "leader.imbalance.per.broker.percentage": _B("int", "10",
        "share of a broker's preferred partitions led elsewhere that triggers a rebalance"),
    "controlled.shutdown.enable": _B("boolean", "true",
        "move leadership away through the controller before stopping"),
    "controlled.shutdown.max.retries": _B("int", "3", "controlled shutdown attempts"),
    "controlled.shutdown.retry.backoff.ms": _B("long", "5000",
        "wait between controlled shutdown attempts"),
    "controller.socket.timeout.ms": _B("int", "30000",
        "timeout of the controller's requests to brokers"),
    "broker.id": _B("int", "-1", "the broker's id (node.id in KRaft mode)"),
    "default.replication.factor": _B("int", "1", "replication factor of auto-created topics"),
    "delete.topic.enable": _B("boolean", "true", "allow topics to be deleted"),
    "group.initial.rebalance.delay.ms": _B("int", "3000",
        "how long a new group waits for more members before its first rebalance"),
    "group.max.session.timeout.ms": _B("int", "1800000", "largest session timeout allowed"),
    "group.max.size": _B("int", "2147483647", "most members a group may have"),
    "group.min.session.timeout.ms": _B("int", "6000", "smallest session timeout allowed"),
    "listener.security.protocol.map": _B("string",
        "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
        "security protocol of each listener name"),
    "listeners": _B("string", "PLAINTEXT://:9092", "the addresses the broker listens on"),
    "log.cleaner.backoff.ms": _B("long", "15000", "sleep when there is nothing to clean"),
    "log.cleaner.enable": _B("boolean", "true", "run the log cleaner (needed for compaction)"),
    "log.dir": _B("string", None,
        "the directory where the log data is kept (log.dirs wins; default: --data-dir)"),
    "log.dirs": _B("string", None,
        "comma-separated directories where the log data is kept (default: log.dir)"),
    "log.flush.scheduler.interval.ms": _B("long", "9223372036854775807",
        "how often the flusher checks whether a log needs flushing"),
    "log.retention.check.interval.ms": _B("long", "300000",
        "how often retention is enforced"),
    "replica.alter.log.dirs.io.max.bytes.per.second": _B("long", "9223372036854775807",
        "bytes a second a replica move between log dirs copies (AlterReplicaLogDirs)", True),
    "max.incremental.fetch.session.cache.slots": _B("int", "1000",
        "incremental fetch sessions kept (KIP-227)"),
    "message.max.bytes": _B("int", "1048588", "largest record batch size allowed", True),
    "node.id": _B("int", "-1", "the node's id"),
    "num.partitions": _B("int", "1", "default number of partitions of a new topic"),
    "offsets.retention.check.interval.ms": _B("long", "600000",
        "how often expired offsets are removed"),
    "offsets.retention.minutes": _B("int", "10080",
        "how long offsets of an empty group are kept"),
    "offsets.topic.num.partitions": _B("int", "50", "partitions of __consumer_offsets"),
    "offsets.topic.replication.factor": _B("short", "3",
        "replication factor of __consumer_offsets"),
    "offsets.topic.segment.bytes": _B("int", "104857600", "segment size of __consumer_offsets"),
    "offset.metadata.max.bytes": _B("int", "4096", "largest metadata of an offset commit"),
    "producer.id.expiration.check.interval.ms": _B("int", "600000",
        "how often expired producer ids are removed"),
    "producer.id.expiration.ms": _B("int", "86400000",
        "how long a producer id is kept after its last write"),
    "queued.max.requests": _B("int", "500", "requests queued before the network stops reading"),
    "replica.fetch.backoff.ms": _B("int", "1000", "sleep of a follower after a fetch error"),
    "replica.fetch.max.bytes": _B("int", "1048576", "bytes a follower fetches per partition"),
    "replica.fetch.min.bytes": _B("int", "1", "bytes a follower's fetch waits for"),
    "replica.fetch.response.max.bytes": _B("int", "10485760",
        "bytes a follower fetches per request"),
    "replica.fetch.wait.max.ms": _B("int", "500", "how long a follower's fetch may wait"),
    "replica.high.watermark.checkpoint.interval.ms": _B("long", "5000",
        "how often high watermarks are checkpointed"),
    "replica.lag.time.max.ms": _B("long", "30000",
        "a follower not caught up for this long leaves the ISR"),
    "replica.selector.class": _B("class", None,
        "how a leader picks the replica a consumer with client.rack reads from (KIP-392)"),
    "socket.request.max.bytes": _B("int", "104857600", "largest request accepted"),
    "transaction.state.log.replication.factor": _B("short", "3",
        "replication factor of __transaction_state (cluster mode; capped to the live brokers)"),
    "transaction.state.log.min.isr": _B("int", "2",
        "min.insync.replicas of __transaction_state (cluster mode; at most its replication factor)"),
    "transactional.id.expiration.ms": _B("int", "604800000",
        "how long an idle transactional id is kept"),
}  # fmt: skip

# Coarser-unit synonyms of topic-config synonyms (dynamic too), in Kafka's precedence order.
SYNONYM_GROUPS: tuple[tuple[str, ...], ...] = (
    ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    ("log.roll.ms", "log.roll.hours"),
    ("log.roll.jitter.ms", "log.roll.jitter.hours"),
)
_COARSE: dict[str, BrokerConfigDef] = {
    "log.retention.minutes": _B("int", None, "log retention in minutes (after log.retention.ms)",
                                True),
    "log.retention.hours": _B("int", "168", "log retention in hours (after the minutes)", True),
    "log.roll.hours": _B("int", "168", "segment roll time in hours (after log.roll.ms)", True),
    "log.roll.jitter.hours": _B("int", "0", "roll jitter in hours (after log.roll.jitter.ms)",
                                True),
}  # fmt: skip
# Kafka has no default of its own for the millisecond forms: the coarser synonym's applies.
_NO_KAFKA_DEFAULT = {"log.retention.ms", "log.roll.ms", "log.roll.jitter.ms"}


def _catalogue() -> dict[str, BrokerConfigDef]:
    out = dict(_STATIC)
    for spec in TOPIC_CONFIGS.values():
        name = spec.broker_property
        if name is None:
            continue
        default = None if name in _NO_KAFKA_DEFAULT else spec.default
        out[name] = BrokerConfigDef(spec.type, default, spec.doc, True)
    out.update(_COARSE)
    for name, default in BROKER_DEFAULTS.items():  # strom's defaults where Kafka's differ
        if name in out:
            out[name] = out[name]._replace(default=default)
        else:
            out[name] = BrokerConfigDef("string", default, "")
    return out


BROKER_CONFIGS: dict[str, BrokerConfigDef] = _catalogue()
DYNAMIC_CONFIGS = frozenset(n for n, d in BROKER_CONFIGS.items() if d.dynamic)
# broker property -> the topic config it is the default of
TOPIC_OF: dict[str, str] = {
    s.broker_property: n for n, s in TOPIC_CONFIGS.items() if s.broker_property is not None
}


def synonyms(name: str) -> tuple[str, ...]:
    """The names that set the same thing, in Kafka's precedence order (``name`` alone if
    it has none)."""
    for group in SYNONYM_GROUPS:
        if name in group:
            return group
    return (name,)


def type_id(name: str) -> int:
    spec = BROKER_CONFIGS.get(name)
    return TYPE_IDS.get(spec.type, 0) if spec is not None else 0


def is_sensitive(name: str) -> bool:
    spec = BROKER_CONFIGS.get(name)
    return (spec is not None and spec.type == "password") or "password" in name
