"""Topic/broker config descriptions and IncrementalAlterConfigs arithmetic, without a broker."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from strom.broker import config_resources as cr
from strom.config import BrokerConfig
from strom.protocol.errors import ErrorCode, KafkaError
from strom.storage.errors import InvalidConfigError


def fake_broker(**props: str) -> Any:
    return SimpleNamespace(config=BrokerConfig(props), node_id=1)


def test_topic_sources_and_synonyms() -> None:
    broker = fake_broker(**{"log.retention.ms": "1000"})
    entries = {e.name: e for e in cr.describe_topic(broker, {"cleanup.policy": "compact"})}
    assert len(entries) == len(cr.TOPIC_CONFIGS)
    assert (entries["cleanup.policy"].value, entries["cleanup.policy"].source) == ("compact", 1)
    assert (entries["retention.ms"].value, entries["retention.ms"].source) == ("1000", 4)
    assert (entries["segment.bytes"].value, entries["segment.bytes"].source) == ("1073741824", 5)
    assert entries["cleanup.policy"].synonyms == [
        ("cleanup.policy", "compact", 1),
        ("log.cleanup.policy", "delete", 5),
    ]
    assert entries["retention.ms"].synonyms == [
        ("log.retention.ms", "1000", 4),
        ("log.retention.ms", "604800000", 5),
    ]
    assert entries["retention.ms"].config_type == 5  # LONG
    assert entries["cleanup.policy"].config_type == 7  # LIST
    only = cr.describe_topic(broker, {}, ["segment.ms"])
    assert [(e.name, e.value) for e in only] == [("segment.ms", "604800000")]


def test_broker_entries_are_read_only_with_sources() -> None:
    entries = {e.name: e for e in cr.describe_broker(fake_broker(**{"num.partitions": "3"}))}
    assert (entries["num.partitions"].value, entries["num.partitions"].source) == ("3", 4)
    assert (entries["delete.topic.enable"].value, entries["delete.topic.enable"].source) == (
        "true",
        5,
    )
    assert (entries["log.retention.ms"].value, entries["log.retention.ms"].source) == (
        "604800000",
        5,
    )
    assert all(e.read_only for e in entries.values())


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
