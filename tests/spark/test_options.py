"""Option parsing and admission-control arithmetic (no Spark session, no broker)."""

from __future__ import annotations

import pytest

from strom.spark.offsets import cap_offsets, from_json, to_json
from strom.spark.options import OptionError, parse_read_options, parse_write_options

BASE = {"kafka.bootstrap.servers": "127.0.0.1:1"}


def test_read_options_like_sparks_kafka_source() -> None:
    opts = parse_read_options(
        {**BASE, "subscribe": "a, b", "maxOffsetsPerTrigger": "10", "failOnDataLoss": "false",
         "kafka.security.protocol": "SASL_SSL", "isolation.level": "read_committed"},
        streaming=True,
    )  # fmt: skip
    assert opts.subscription.topics == ("a", "b")
    assert opts.starting.kind == "latest"  # streaming default, as in Spark
    assert opts.max_offsets_per_trigger == 10 and opts.fail_on_data_loss is False
    assert opts.client["security.protocol"] == "SASL_SSL"
    assert opts.client["isolation.level"] == "read_committed"
    batch = parse_read_options({**BASE, "assign": '{"t": [1, 0]}'}, streaming=False)
    assert batch.starting.kind == "earliest" and batch.subscription.assign == {"t": (0, 1)}
    pattern = parse_read_options({**BASE, "subscribePattern": "ev.*"}, streaming=True)
    assert pattern.subscription.matches("events") and not pattern.subscription.matches("xevents")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "exactly one of the options"),
        ({"subscribe": "a", "assign": '{"a":[0]}'}, "exactly one of the options"),
        ({"subscribe": "a", "startingOffsets": "{bad"}, "not valid JSON"),
        ({"subscribe": "a", "maxOffsetsPerTrigger": "0"}, "at least 1"),
        ({"subscribe": "a", "failOnDataLoss": "maybe"}, "true or false"),
        ({"subscribe": "a", "kafka.group.id": "g"}, "kafka.group.id"),
        ({"subscribe": "a", "endingOffsets": "latest"}, "batch queries only"),
        ({"subscribe": "a", "isolation.level": "dirty"}, "read_committed or read_uncommitted"),
        ({"assign": '{"a":[0,1]}', "startingOffsets": '{"a":{"0":3}}'}, "misses assigned"),
    ],
)
def test_bad_read_options_name_the_option(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message):
        parse_read_options({**BASE, **options}, streaming=True)
    with pytest.raises(OptionError, match="kafka.bootstrap.servers"):
        parse_read_options({"subscribe": "a"}, streaming=True)


def test_write_options_default_to_java_partitioning() -> None:
    opts = parse_write_options({**BASE, "topic": "out"})
    assert opts.client["partitioner"] == "murmur2_random" and not opts.exactly_once
    own = parse_write_options({**BASE, "kafka.partitioner": "consistent_random"})
    assert own.client["partitioner"] == "consistent_random"
    with pytest.raises(OptionError, match="needs the 'topic' option"):
        parse_write_options({**BASE, "exactlyOnce": "true"})


def test_offsets_json_round_trip() -> None:
    offsets = {("b", 1): 7, ("a", 0): 3, ("a", 10): 1}
    assert to_json(offsets) == {"a": {"0": 3, "10": 1}, "b": {"1": 7}}
    assert from_json({**to_json(offsets), "$initial": {"a": {"0": 0}}}) == offsets


def test_cap_offsets_shares_the_limit_in_proportion() -> None:
    start = {("t", 0): 0, ("t", 1): 100}
    latest = {("t", 0): 300, ("t", 1): 200, ("t", 2): 0}
    end = cap_offsets(start, latest, 100)
    assert end == {("t", 0): 75, ("t", 1): 125, ("t", 2): 0}
    assert cap_offsets(start, latest, 1000) == latest
    tiny = cap_offsets({("t", 0): 0, ("t", 1): 0}, {("t", 0): 1000, ("t", 1): 1}, 10)
    assert sum(tiny.values()) <= 10 and tiny[("t", 1)] == 1
