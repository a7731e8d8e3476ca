"""Topic/broker config descriptions and IncrementalAlterConfigs arithmetic, without a broker."""

from __future__ import annotations

from pathlib import Path

import pytest

from strom.broker import config_resources as cr
from strom.broker.dynamic_config import DynamicConfig
from strom.broker.node import NodeIdentity
from strom.config import BrokerConfig
from strom.protocol.errors import ErrorCode, KafkaError
from strom.storage.errors import InvalidConfigError


def fake_broker(**props: str) -> DynamicConfig:
    """A broker's dynamic configs with no store behind them (nothing here reads or writes it)
    and no topics."""
    node = NodeIdentity(1, "c", ("localhost", 9092), ("127.0.0.1", 9092), None, Path("/data"),
                        (Path("/data"),))  # fmt: skip
    return DynamicConfig(None, BrokerConfig(props), node, [])  # type: ignore[arg-type]


def test_topic_sources_and_synonyms() -> None:
    broker = fake_broker(**{"log.retention.ms": "1000"})
    entries = {e.name: e for e in cr.describe_topic(broker, {"cleanup.policy": "compact"})}
    kafka_only = {n for n, k in cr.KAFKA_ONLY_TOPIC_CONFIGS.items() if not k.internal}
    assert set(entries) == set(cr.TOPIC_CONFIGS) | kafka_only
    assert "remote.storage.enable" in kafka_only and "internal.segment.bytes" not in entries
    assert (entries["cleanup.policy"].value, entries["cleanup.policy"].source) == ("compact", 1)
    assert (entries["retention.ms"].value, entries["retention.ms"].source) == ("1000", 4)
    assert (entries["segment.bytes"].value, entries["segment.bytes"].source) == ("1073741824", 5)
    assert entries["cleanup.policy"].synonyms == [
        ("cleanup.policy", "compact", 1),
        ("log.cleanup.policy", "delete", 5),
    ]
    assert entries["retention.ms"].synonyms == [
        ("log.retention.ms", "1000", 4),
        ("log.retention.hours", "168", 5),  # Kafka's default is the hours'
    ]
    assert entries["retention.ms"].config_type == 5  # LONG
    assert entries["cleanup.policy"].config_type == 7  # LIST
    only = cr.describe_topic(broker, {}, ["segment.ms"])
    assert [(e.name, e.value) for e in only] == [("segment.ms", "604800000")]


def test_topic_synonyms_start_at_the_primary_broker_name() -> None:
    """Kafka lists a topic config's broker synonyms from its primary name's first entry on:
    ``log.retention.ms`` set nowhere, ``retention.ms`` has none (not the hours' default), as
    kafka-configs --describe against Kafka 4.4 shows (tests/jvm golden)."""
    entries = {e.name: e for e in cr.describe_topic(fake_broker(), {"retention.ms": "7200000"})}
    assert entries["retention.ms"].synonyms == [("retention.ms", "7200000", 1)]
    assert entries["segment.ms"].synonyms == []  # log.roll.ms unset: log.roll.hours not listed
    assert (entries["segment.ms"].value, entries["segment.ms"].source) == ("604800000", 5)
    assert entries["segment.bytes"].synonyms == [("log.segment.bytes", "1073741824", 5)]
    hours = {e.name: e for e in cr.describe_topic(fake_broker(**{"log.retention.hours": "24"}),
                                                  {})}  # fmt: skip
    assert hours["retention.ms"].synonyms == []  # also when only the hours are set


def test_broker_entries_with_sources_types_and_read_only() -> None:
    broker = fake_broker(**{"num.partitions": "3"})
    entries = {e.name: e for e in cr.describe_broker(broker, "1")}
    assert (entries["num.partitions"].value, entries["num.partitions"].source) == ("3", 4)
    assert (entries["delete.topic.enable"].value, entries["delete.topic.enable"].source) == (
        "true",
        5,
    )
    assert (entries["log.retention.hours"].value, entries["log.retention.hours"].source) == (
        "168",
        5,
    )
    assert entries["log.retention.hours"].read_only  # Kafka: only log.retention.ms is dynamic
    relogin = entries["sasl.kerberos.min.time.before.relogin"]  # Kafka's, no effect in strom
    assert (relogin.value, relogin.source, relogin.read_only) == ("60000", 5, False)
    assert relogin.documentation and relogin.config_type == 5
    assert "producer.id.expiration.check.interval.ms" not in entries  # internal in Kafka
    assert entries["advertised.listeners"].value == "PLAINTEXT://localhost:9092"
    assert entries["listeners"].value == "PLAINTEXT://127.0.0.1:9092"
    assert entries["num.partitions"].read_only and entries["node.id"].read_only
    assert not entries["log.retention.ms"].read_only and not entries["message.max.bytes"].read_only
    types = (entries["num.partitions"].config_type, entries["log.retention.ms"].config_type)
    assert types == (3, 5)  # INT, LONG
    assert entries["log.cleaner.enable"].config_type == 1
    assert all(e.config_type != 0 for e in entries.values())
    # the cluster-wide default lists only what is set there
    assert cr.describe_broker(broker, "<default>") == []
    broker.config.set_dynamic({"log.retention.ms": "2"}, {}, cr.defs.synonyms)
    [entry] = cr.describe_broker(broker, "<default>")
    assert (entry.name, entry.value, entry.source, entry.synonyms) == (
        "log.retention.ms", "2", 3, [("log.retention.ms", "2", 3)]
    )


def test_incremental_operations() -> None:
    broker = fake_broker()
    current = {"retention.ms": "1000", "segment.ms": "5000"}
    ops = [
        ("cleanup.policy", cr.APPEND, "compact"),
        ("retention.ms", cr.DELETE, None),
        ("segment.ms", cr.SET, "7000"),
    ]
    assert cr.incremental(broker, current, ops) == {
        "cleanup.policy": "delete,compact",
        "segment.ms": "7000",
    }
    after = cr.incremental(
        broker, {"cleanup.policy": "delete,compact"}, [("cleanup.policy", cr.SUBTRACT, "delete")]
    )
    assert after == {"cleanup.policy": "compact"}
    # appending what is there already changes nothing
    same = cr.incremental(
        broker, {"cleanup.policy": "compact"}, [("cleanup.policy", cr.APPEND, "compact")]
    )
    assert same == {"cleanup.policy": "compact"}


@pytest.mark.parametrize(
    "ops",
    [
        [("retention.ms", cr.APPEND, "1")],
        [("no.such.config", cr.SET, "1")],
        [("retention.ms", cr.SET, None)],
    ],
)
def test_incremental_invalid(ops: list[tuple[str, int, str | None]]) -> None:
    with pytest.raises(InvalidConfigError):
        cr.incremental(fake_broker(), {}, ops)


def test_incremental_duplicate_key_is_invalid_request() -> None:
    with pytest.raises(KafkaError) as info:
        cr.incremental(
            fake_broker(), {}, [("segment.ms", cr.SET, "1"), ("segment.ms", cr.DELETE, None)]
        )
    assert info.value.error_code == ErrorCode.invalid_request


def test_validate_overrides() -> None:
    broker = fake_broker()
    assert cr.validate_overrides(broker, {"retention.ms": "-1"}) == {"retention.ms": "-1"}
    for bad in ({"retention.ms": "-2"}, {"cleanup.policy": "shred"}, {"retention.ms": None}):
        with pytest.raises(InvalidConfigError):
            cr.validate_overrides(broker, bad)
    # Kafka's topic configs strom does not act on: accepted when Kafka would accept them
    kept = {"remote.storage.enable": "false", "compression.zstd.level": "5",
            "leader.replication.throttled.replicas": "0:1,1:2", "local.retention.ms": "-2"}
    assert cr.validate_overrides(broker, kept) == kept
    refused = [({"remote.storage.enable": "maybe"}, "Expected value to be either true or false"),
               ({"compression.zstd.level": "99"}, "Value must be no more than 22"),
               ({"local.retention.ms": "x"}, "Not a number of type LONG"),
               ({"no.such.topic.config": "1"}, "Unknown topic config name")]  # fmt: skip
    for bad, why in refused:
        with pytest.raises(InvalidConfigError, match=why):
            cr.validate_overrides(broker, bad)
    entries = {e.name: e for e in cr.describe_topic(broker, {"compression.zstd.level": "5"})}
    assert (entries["compression.zstd.level"].value, entries["compression.zstd.level"].source) \
        == ("5", 1)
    assert (entries["remote.storage.enable"].value, entries["remote.storage.enable"].source) \
        == ("false", 5)
    assert entries["local.retention.ms"].synonyms == [("log.local.retention.ms", "-2", 5)]


def test_dynamic_layers_win_in_order_and_hide_synonyms_below() -> None:
    config = BrokerConfig({"log.retention.ms": "1000", "num.partitions": "2"})
    config.set_dynamic({"log.retention.hours": "5", "log.segment.bytes": "2048"},
                       {"log.segment.bytes": "4096"}, cr.defs.synonyms)  # fmt: skip
    values = config.values
    assert values["log.segment.bytes"] == "4096"  # this broker's beats the cluster default
    assert "log.retention.ms" not in values and values["log.retention.hours"] == "5"
    assert values["num.partitions"] == "2" and values["node.id"] == "1"
    from strom.storage.log_config import LogConfig

    assert LogConfig.from_configs({}, values).retention_ms == 5 * 3600 * 1000
    config.set_dynamic({}, {}, cr.defs.synonyms)
    assert values["log.retention.ms"] == "1000" and "log.segment.bytes" not in values
