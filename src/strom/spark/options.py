"""Options of the ``strom`` data source, named and defaulted like Spark's Kafka source.

Pure parsing (no pyspark, no network): every value Spark hands the data source is a string, and
a bad one becomes :class:`OptionError` with one readable line naming the option.

Reader options: exactly one of ``subscribe`` (comma-separated topics), ``subscribePattern``
(a Java-compatible regex, matched against the whole name) or ``assign`` (JSON
``{"t":[0,1]}``); ``startingOffsets`` (``earliest``, ``latest`` or JSON
``{"t":{"0":23,"1":-2}}`` with -2 = earliest, -1 = latest), ``startingTimestamp`` (ms, for all
partitions), ``endingOffsets`` (batch only; ``latest`` or JSON with -1), ``maxOffsetsPerTrigger``
and ``minOffsetsPerTrigger`` with ``maxTriggerDelay``, ``failOnDataLoss`` (default true),
``includeHeaders`` (default false), ``kafkaConsumer.pollTimeoutMs``,
``startingOffsetsByTimestampStrategy`` (error, the default, or latest) and every ``kafka.*``
option, passed to confluent-kafka without the prefix. ``isolation.level`` is accepted with or
without the ``kafka.`` prefix. Client security settings (``kafka.security.protocol``,
``kafka.sasl.*``, ``kafka.ssl.*``) may use librdkafka's names or the Java client's that users
give Spark's own Kafka source (``kafka.ssl.truststore.location``, ``kafka.sasl.jaas.config``):
those are carried over to librdkafka's by :func:`strom.admin.client_security.to_librdkafka`
(which reads the key and trust store files named, here on the driver).

Writer options: ``topic`` (used when a row has no ``topic`` column value), ``exactlyOnce``,
``kafka.*``; the partitioner defaults to ``murmur2_random`` (Java's default partitioning).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from strom.admin.client_security import to_librdkafka
from strom.admin.errors import AdminError

EARLIEST, LATEST = -2, -1

# Options that configure the Spark side and must not reach librdkafka (Spark's Kafka source
# refuses them too: the source manages offsets and group membership itself).
_CLIENT_OPTIONS_REFUSED = {
    "group.id": "the source assigns partitions itself and commits no offsets",
    "auto.offset.reset": "use startingOffsets",
    "enable.auto.commit": "the source commits no offsets",
    "key.deserializer": "key and value are binary columns",
    "value.deserializer": "key and value are binary columns",
    "key.serializer": "key and value are binary columns",
    "value.serializer": "key and value are binary columns",
}


class OptionError(ValueError):
    """An option has a value the data source cannot use; the message names it."""


@dataclass(frozen=True)
class Subscription:
    """Which partitions to read: fixed topics, a pattern, or fixed partitions."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assign: Mapping[str, tuple[int, ...]] | None = None

    def matches(self, topic: str) -> bool:
        if self.assign is not None:
            return topic in self.assign
        if self.pattern is not None:
            return re.fullmatch(self.pattern, topic) is not None
        return topic in self.topics


@dataclass(frozen=True)
class OffsetSpec:
    """A starting or ending position: ``kind`` earliest/latest/timestamp/json.

    ``per_partition`` holds the JSON form ({topic: {partition: offset}}) with -2/-1 allowed.
    """

    kind: str
    per_partition: Mapping[str, Mapping[int, int]] = field(default_factory=dict)
    timestamp_ms: int | None = None


@dataclass(frozen=True)
class ReadOptions:
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    client: Mapping[str, str]
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60 * 1000
    fail_on_data_loss: bool = True
    include_headers: bool = False
    poll_timeout_ms: int = 120_000
    timestamp_strategy: str = "error"

    @property
    def bootstrap(self) -> str:
        return self.client["bootstrap.servers"]


@dataclass(frozen=True)
class WriteOptions:
    client: Mapping[str, str]
    topic: str | None = None
    exactly_once: bool = False
    transactional_id_prefix: str = "strom-spark"
    init_timeout_ms: int = 60_000


def _lower_keys(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


def parse_bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name.lower())
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise OptionError(f"option {name!r} must be true or false, not {raw!r}")


def parse_int(options: Mapping[str, str], name: str, minimum: int = 0) -> int | None:
    raw = options.get(name.lower())
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise OptionError(f"option {name!r} must be an integer, not {raw!r}") from None
    if value < minimum:
        raise OptionError(f"option {name!r} must be at least {minimum}, not {value}")
    return value


def parse_duration_ms(options: Mapping[str, str], name: str, default: int) -> int:
    """Spark's duration strings ('15m', '30s', '500ms', '2h') or plain milliseconds."""
    raw = options.get(name.lower())
    if raw is None:
        return default
    match = re.fullmatch(r"\s*(\d+)\s*(ms|s|m|min|h|d)?\s*", raw.lower())
    if not match:
        raise OptionError(f"option {name!r} must be a duration like '15m' or '500ms', not {raw!r}")
    unit = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}
    return int(match.group(1)) * unit[match.group(2) or "ms"]


def client_config(options: Mapping[str, str]) -> dict[str, str]:
    """The ``kafka.*`` options without their prefix; ``kafka.bootstrap.servers`` is required."""
    lowered = _lower_keys(options)
    config = {k[len("kafka.") :]: v for k, v in lowered.items() if k.startswith("kafka.")}
    if not config.get("bootstrap.servers"):
        raise OptionError("option 'kafka.bootstrap.servers' is required")
    for name, why in _CLIENT_OPTIONS_REFUSED.items():
        if name in config:
            raise OptionError(f"option 'kafka.{name}' is not supported: {why}")
    try:
        config = to_librdkafka(config)
    except AdminError as exc:
        raise OptionError(f"option kafka.{exc.message}") from None
    if "isolation.level" in lowered:
        config["isolation.level"] = lowered["isolation.level"]
    level = config.get("isolation.level")
    if level is not None and level not in ("read_committed", "read_uncommitted"):
        raise OptionError(
            f"option 'isolation.level' must be read_committed or read_uncommitted, not {level!r}"
        )
    return config


def _json(options: Mapping[str, str], name: str) -> Any:
    raw = options[name.lower()]
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise OptionError(f"option {name!r} is not valid JSON: {exc.msg}") from None


def parse_subscription(options: Mapping[str, str]) -> Subscription:
    given = [n for n in ("subscribe", "subscribepattern", "assign") if n in options]
    if len(given) != 1:
        raise OptionError(
            "exactly one of the options 'subscribe', 'subscribePattern', 'assign' is required"
        )
    if given[0] == "subscribe":
        topics = tuple(t.strip() for t in options["subscribe"].split(",") if t.strip())
        if not topics:
            raise OptionError("option 'subscribe' names no topic")
        return Subscription(topics=topics)
    if given[0] == "subscribepattern":
        pattern = options["subscribepattern"]
        try:
            re.compile(pattern)
        except re.error as exc:
            raise OptionError(f"option 'subscribePattern' is not a valid regex: {exc}") from None
        return Subscription(pattern=pattern)
    value = _json(options, "assign")
    if not isinstance(value, dict) or not value:
        raise OptionError('option \'assign\' must be JSON like {"topic":[0,1]}')
    assign: dict[str, tuple[int, ...]] = {}
    for topic, parts in value.items():
        if not isinstance(parts, list) or not all(isinstance(p, int) and p >= 0 for p in parts):
            raise OptionError(f"option 'assign': partitions of {topic!r} must be a list of ints")
        assign[str(topic)] = tuple(sorted(set(parts)))
    return Subscription(assign=assign)


def parse_offset_spec(
    options: Mapping[str, str], name: str, default: str, allowed: tuple[str, ...]
) -> OffsetSpec:
    raw = options.get(name.lower())
    if raw is None:
        return OffsetSpec(kind=default)
    word = raw.strip().lower()
    if word in ("earliest", "latest"):
        if word not in allowed:
            raise OptionError(f"option {name!r} cannot be {word!r}")
        return OffsetSpec(kind=word)
    value = _json(options, name)
    if not isinstance(value, dict):
        raise OptionError(f"option {name!r} must be {'/'.join(allowed)} or JSON per partition")
    table: dict[str, dict[int, int]] = {}
    for topic, parts in value.items():
        if not isinstance(parts, dict):
            raise OptionError(f'option {name!r}: {topic!r} must map to {{"0": offset}}')
        per: dict[int, int] = {}
        for part, offset in parts.items():
            try:
                per[int(part)] = int(offset)
            except (TypeError, ValueError):
                raise OptionError(f"option {name!r}: bad entry {part!r}: {offset!r}") from None
            if per[int(part)] < EARLIEST or (per[int(part)] == EARLIEST and "earliest" not in allowed):
                raise OptionError(f"option {name!r}: offset {offset} is not allowed here")
        table[str(topic)] = per
    return OffsetSpec(kind="json", per_partition=table)


def parse_read_options(options: Mapping[str, str], streaming: bool) -> ReadOptions:
    lowered = _lower_keys(options)
    subscription = parse_subscription(lowered)
    timestamp = parse_int(lowered, "startingTimestamp")
    if timestamp is not None:
        starting = OffsetSpec(kind="timestamp", timestamp_ms=timestamp)
    else:
        default = "latest" if streaming else "earliest"
        starting = parse_offset_spec(lowered, "startingOffsets", default, ("earliest", "latest"))
    if streaming and "endingoffsets" in lowered:
        raise OptionError("option 'endingOffsets' is for batch queries only")
    ending = parse_offset_spec(lowered, "endingOffsets", "latest", ("latest",))
    if not streaming and starting.kind == "latest":
        raise OptionError("option 'startingOffsets' cannot be 'latest' for a batch query")
    if subscription.assign is not None and starting.kind == "json":
        missing = {
            (t, p)
            for t, parts in subscription.assign.items()
            for p in parts
            if p not in starting.per_partition.get(t, {})
        }
        if missing:
            raise OptionError(f"option 'startingOffsets' misses assigned partitions {sorted(missing)}")
    strategy = lowered.get("startingoffsetsbytimestampstrategy", "error").lower()
    if strategy not in ("error", "latest"):
        raise OptionError("option 'startingOffsetsByTimestampStrategy' must be error or latest")
    max_per = parse_int(lowered, "maxOffsetsPerTrigger", minimum=1)
    min_per = parse_int(lowered, "minOffsetsPerTrigger", minimum=1)
    if max_per is not None and min_per is not None and min_per > max_per:
        raise OptionError("option 'minOffsetsPerTrigger' is larger than 'maxOffsetsPerTrigger'")
    return ReadOptions(
        subscription=subscription,
        starting=starting,
        ending=ending,
        client=client_config(lowered),
        max_offsets_per_trigger=max_per,
        min_offsets_per_trigger=min_per,
        max_trigger_delay_ms=parse_duration_ms(lowered, "maxTriggerDelay", 15 * 60 * 1000),
        fail_on_data_loss=parse_bool(lowered, "failOnDataLoss", True),
        include_headers=parse_bool(lowered, "includeHeaders", False),
        poll_timeout_ms=parse_int(lowered, "kafkaConsumer.pollTimeoutMs", minimum=1) or 120_000,
        timestamp_strategy=strategy,
    )


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    lowered = _lower_keys(options)
    client = client_config(lowered)
    client.pop("isolation.level", None)
    client.setdefault("partitioner", "murmur2_random")
    exactly_once = parse_bool(lowered, "exactlyOnce", False)
    topic = lowered.get("topic")
    if exactly_once and "transactional.id" in client:
        raise OptionError(
            "option 'kafka.transactional.id' is set by the sink in exactlyOnce mode; "
            "use 'transactionalIdPrefix' to change its prefix"
        )
    if exactly_once and not topic:
        raise OptionError(
            "exactlyOnce=true needs the 'topic' option: the sink records each batch in a "
            "transaction against it (rows may still name other topics in a 'topic' column)"
        )
    return WriteOptions(
        client=client,
        topic=topic,
        exactly_once=exactly_once,
        transactional_id_prefix=lowered.get("transactionalidprefix", "strom-spark"),
        init_timeout_ms=parse_int(lowered, "exactlyOnce.initTimeoutMs", minimum=1) or 60_000,
    )
