"""Per-topic log configuration: Kafka's topic config names, defaults and broker fallbacks.

Precedence (what :meth:`LogConfig.from_configs` and :func:`effective_configs` implement):
a topic override (DYNAMIC_TOPIC_CONFIG) beats the broker property (STATIC_BROKER_CONFIG),
which beats Kafka's default (DEFAULT_CONFIG). Values are strings everywhere outside
:class:`LogConfig`, as on the wire.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from strom.storage.errors import InvalidConfigError

LONG_MAX = 2**63 - 1
_MS_HOUR = 3_600_000
_MS_MINUTE = 60_000

DYNAMIC_TOPIC_CONFIG = "DYNAMIC_TOPIC_CONFIG"
STATIC_BROKER_CONFIG = "STATIC_BROKER_CONFIG"
DEFAULT_CONFIG = "DEFAULT_CONFIG"

COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")


class TopicConfigDef(NamedTuple):
    """One topic config: its Kafka default, the broker property it falls back to, type, doc."""

    default: str
    broker_property: str | None
    type: str  # "long" | "int" | "double" | "boolean" | "string" | "list"
    doc: str
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] | None = None


_D = TopicConfigDef
TOPIC_CONFIGS: dict[str, TopicConfigDef] = {
    "cleanup.policy": _D("delete", "log.cleanup.policy", "list",
        "delete old segments, compact by key, or both", choices=("delete", "compact")),
    "compression.type": _D("producer", "compression.type", "string",
        "final compression of the topic's data; 'producer' keeps the producer's codec",
        choices=COMPRESSION_TYPES),
    "delete.retention.ms": _D("86400000", "log.cleaner.delete.retention.ms", "long",
        "how long compaction keeps tombstones", minimum=0),
    "file.delete.delay.ms": _D("60000", "log.segment.delete.delay.ms", "long",
        "wait before deleting a file from the file system", minimum=0),
    "flush.messages": _D(str(LONG_MAX), "log.flush.interval.messages", "long",
        "fsync after this many messages", minimum=1),
    "flush.ms": _D(str(LONG_MAX), "log.flush.interval.ms", "long",
        "fsync after this much time", minimum=0),
    "index.interval.bytes": _D("4096", "log.index.interval.bytes", "int",
        "bytes between offset index entries", minimum=0),
    "max.compaction.lag.ms": _D(str(LONG_MAX), "log.cleaner.max.compaction.lag.ms", "long",
        "longest time a record stays ineligible for compaction", minimum=1),
    "max.message.bytes": _D("1048588", "message.max.bytes", "int",
        "largest record batch size allowed", minimum=0),
    "message.timestamp.after.max.ms": _D(str(LONG_MAX),
        "log.message.timestamp.after.max.ms", "long",
        "how far a CreateTime timestamp may be ahead of the broker's clock", minimum=0),
    "message.timestamp.before.max.ms": _D(str(LONG_MAX),
        "log.message.timestamp.before.max.ms", "long",
        "how far a CreateTime timestamp may be behind the broker's clock", minimum=0),
    "message.timestamp.difference.max.ms": _D(str(LONG_MAX),
        "log.message.timestamp.difference.max.ms", "long",
        "deprecated: both timestamp bounds, where before/after.max.ms are left at default",
        minimum=0),
    "message.timestamp.type": _D("CreateTime", "log.message.timestamp.type", "string",
        "CreateTime or LogAppendTime", choices=TIMESTAMP_TYPES),
    "min.cleanable.dirty.ratio": _D("0.5", "log.cleaner.min.cleanable.ratio", "double",
        "dirty/total ratio above which the log is compacted", minimum=0, maximum=1),
    "min.compaction.lag.ms": _D("0", "log.cleaner.min.compaction.lag.ms", "long",
        "shortest time a record stays uncompacted", minimum=0),
    "min.insync.replicas": _D("1", "min.insync.replicas", "int",
        "replicas that must acknowledge an acks=all write", minimum=1),
    "preallocate": _D("false", "log.preallocate", "boolean", "preallocate segment files"),
    "retention.bytes": _D("-1", "log.retention.bytes", "long",
        "largest partition size before old segments are deleted; -1 unlimited"),
    "retention.ms": _D("604800000", "log.retention.ms", "long",
        "longest time a segment is kept; -1 unlimited", minimum=-1),
    "segment.bytes": _D("1073741824", "log.segment.bytes", "int",
        "segment file size", minimum=14),
    "segment.index.bytes": _D("10485760", "log.index.size.max.bytes", "int",
        "largest offset index file; the segment rolls when it is full", minimum=8),
    "segment.jitter.ms": _D("0", "log.roll.jitter.ms", "long",
        "random jitter subtracted from segment.ms", minimum=0),
    "segment.ms": _D("604800000", "log.roll.ms", "long",
        "roll the segment after this time even if not full", minimum=1),
    "unclean.leader.election.enable": _D("false", "unclean.leader.election.enable", "boolean",
        "allow out-of-sync replicas to become leader"),
}  # fmt: skip

# Broker properties with coarser units that stand in when the main property is unset.
_BROKER_FALLBACKS: dict[str, list[tuple[str, int]]] = {
    "retention.ms": [("log.retention.minutes", _MS_MINUTE), ("log.retention.hours", _MS_HOUR)],
    "segment.ms": [("log.roll.hours", _MS_HOUR)],
    "segment.jitter.ms": [("log.roll.jitter.hours", _MS_HOUR)],
}


def validate_topic_config(name: str, value: str) -> Any:
    """Parse ``value`` for config ``name``; raise :class:`InvalidConfigError` if it is bad.

    Returns the parsed Python value (int, float, bool, str).
    """
    spec = TOPIC_CONFIGS.get(name)
    if spec is None:
        raise InvalidConfigError(f"Unknown topic config name: {name}")
    text = value.strip()
    parsed: Any
    if spec.type in ("long", "int"):
        try:
            parsed = int(text)
        except ValueError:
            raise InvalidConfigError(  # Kafka's ConfigDef words, as its tools print them
                f"Invalid value {value} for configuration {name}: Not a number of type "
                f"{spec.type.upper()}"
            ) from None
        limit = 2**31 - 1 if spec.type == "int" else LONG_MAX
        if not -limit - 1 <= parsed <= limit:
            raise InvalidConfigError(f"Invalid value {value} for configuration {name}: too large")
    elif spec.type == "double":
        try:
            parsed = float(text)
        except ValueError:
            raise InvalidConfigError(  # Kafka's ConfigDef words, as its tools print them
                f"Invalid value {value} for configuration {name}: Not a number of type "
                f"{spec.type.upper()}"
            ) from None
    elif spec.type == "boolean":
        if text.lower() not in ("true", "false"):
            raise InvalidConfigError(
                f"Invalid value {value} for configuration {name}: Expected value to be either "
                "true or false"
            )
        parsed = text.lower() == "true"
    elif spec.type == "list":
        items = [item.strip() for item in text.split(",") if item.strip()]
        if spec.choices is not None:
            for item in items:
                if item not in spec.choices:
                    raise InvalidConfigError(
                        f"Invalid value {value!r} for configuration {name}: "
                        f"each item must be one of {', '.join(spec.choices)}"
                    )
        parsed = ",".join(items)
    else:
        parsed = text
        if spec.choices is not None and parsed not in spec.choices:
            raise InvalidConfigError(
                f"Invalid value {value!r} for configuration {name}: "
                f"must be one of {', '.join(spec.choices)}"
            )
    if spec.minimum is not None and parsed < spec.minimum:
        raise InvalidConfigError(
            f"Invalid value {value} for configuration {name}: must be at least {spec.minimum:g}"
        )
    if spec.maximum is not None and parsed > spec.maximum:
        raise InvalidConfigError(
            f"Invalid value {value} for configuration {name}: must be at most {spec.maximum:g}"
        )
    return parsed


def _broker_value(name: str, broker: Mapping[str, str]) -> str | None:
    spec = TOPIC_CONFIGS[name]
    if spec.broker_property is not None and spec.broker_property in broker:
        return broker[spec.broker_property]
    for prop, scale in _BROKER_FALLBACKS.get(name, []):
        if prop in broker:
            try:
                return str(int(broker[prop]) * scale)
            except ValueError:
                raise InvalidConfigError(f"Invalid value {broker[prop]!r} for {prop}") from None
    return None


def effective_configs(
    overrides: Mapping[str, str], broker: Mapping[str, str] | None = None
) -> dict[str, tuple[str, str]]:
    """Every topic config's effective value and its source, for DescribeConfigs."""
    broker = broker or {}
    out: dict[str, tuple[str, str]] = {}
    for name, spec in TOPIC_CONFIGS.items():
        if name in overrides:
            out[name] = (overrides[name], DYNAMIC_TOPIC_CONFIG)
            continue
        value = _broker_value(name, broker)
        out[name] = (
            (spec.default, DEFAULT_CONFIG) if value is None else (value, STATIC_BROKER_CONFIG)
        )
    return out


_TIMESTAMP_TYPE = {"CreateTime": 0, "LogAppendTime": 1}


@dataclass(frozen=True)
class LogConfig:
    """A topic's effective log configuration (Kafka names with '.' → '_').

    The derived values below are computed once per instance (``cached_property`` writes the
    instance's ``__dict__``, which a frozen dataclass allows): every append reads them."""

    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10485760
    index_interval_bytes: int = 4096
    retention_ms: int = 604800000
    retention_bytes: int = -1
    cleanup_policy: str = "delete"
    max_message_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = LONG_MAX
    message_timestamp_difference_max_ms: int = LONG_MAX
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    delete_retention_ms: int = 86400000
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    file_delete_delay_ms: int = 60000
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    compression_type: str = "producer"
    preallocate: bool = False

    @functools.cached_property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy.split(",")

    @functools.cached_property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy.split(",")

    @functools.cached_property
    def timestamp_before_max_ms(self) -> int:
        """The effective before bound: the deprecated difference.max.ms applies where
        before.max.ms is left at its default (Kafka 3.6+ ``LogConfig``)."""
        if self.message_timestamp_before_max_ms != LONG_MAX:
            return self.message_timestamp_before_max_ms
        return self.message_timestamp_difference_max_ms

    @functools.cached_property
    def timestamp_after_max_ms(self) -> int:
        """The effective after bound (see :attr:`timestamp_before_max_ms`)."""
        if self.message_timestamp_after_max_ms != LONG_MAX:
            return self.message_timestamp_after_max_ms
        return self.message_timestamp_difference_max_ms

    @functools.cached_property
    def timestamp_type(self) -> int:
        """0 CreateTime, 1 LogAppendTime (the batch attribute bit's value)."""
        return _TIMESTAMP_TYPE[self.message_timestamp_type]

    @classmethod
    def from_configs(
        cls, overrides: Mapping[str, str], broker: Mapping[str, str] | None = None
    ) -> LogConfig:
        """Build from topic overrides and broker properties; raises InvalidConfigError."""
        values: dict[str, Any] = {}
        for name, (value, _source) in effective_configs(overrides, broker).items():
            values[name.replace(".", "_")] = validate_topic_config(name, value)
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in fields})

    def to_configs(self) -> dict[str, str]:
        """This config as Kafka-named strings."""
        out: dict[str, str] = {}
        for name in TOPIC_CONFIGS:
            attr = name.replace(".", "_")
            if hasattr(self, attr):
                value = getattr(self, attr)
                out[name] = str(value).lower() if isinstance(value, bool) else str(value)
        return out


ConfigLoader = Callable[[str], Mapping[str, str]]
