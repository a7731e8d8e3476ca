"""The ``strom`` CLI run as a subprocess against a real broker, parsed as a script would."""

from __future__ import annotations

import json
import time

import pytest

from strom.testing import free_port
from tests.integration.cli_helpers import Cli, assert_clean_error, eventually, side_by_side, strom


@pytest.fixture
def cli(broker) -> Cli:  # type: ignore[no-untyped-def]
    return Cli(str(broker.bootstrap))


def create(cli: Cli, topic: str, partitions: int, *extra: str) -> None:
    out = cli.ok("topic", "create", topic, "--partitions", str(partitions), *extra)
    assert out == f"Created topic {topic}.\n"


def parse_describe(output: str) -> tuple[dict[str, str], list[dict[str, str]]]:
    """(header fields, partition lines' fields) of Kafka's describe format."""
    rows = output.splitlines()
    header = dict(
        f.split(": ", 1) if ": " in f else (f.rstrip(": "), "") for f in rows[0].split("\t")
    )
    parts = [
        dict(f.split(": ", 1) for f in row.strip("\t").split("\t"))
        for row in rows[1:]
        if row.startswith("\t")
    ]
    return header, parts


def test_topic_create_list_describe_alter_delete(cli: Cli, topic_name: str) -> None:
    rf = len(cli.bootstrap.split(","))  # the brokers' default: 1, or a test cluster's 3
    create(cli, topic_name, 3, "--config", "retention.ms=123456")
    eventually(lambda: _assert_listed(cli, topic_name, True))
    assert {"name": topic_name, "partitions": 3, "replicas": rf, "internal": False} in json.loads(
        cli.ok("topic", "list", "--format", "json")
    )

    header, parts = parse_describe(cli.ok("topic", "describe", topic_name))
    assert header["Topic"] == topic_name
    assert header["PartitionCount"] == "3"
    assert header["ReplicationFactor"] == str(rf)
    assert header["TopicId"] not in ("", "-")
    assert "retention.ms=123456" in header["Configs"].split(",")
    assert [p["Partition"] for p in parts] == ["0", "1", "2"]
    for p in parts:
        assert p["Topic"] == topic_name
        replicas = p["Replicas"].split(",")
        assert len(set(replicas)) == rf and p["Leader"] in replicas
        assert sorted(p["Isr"].split(",")) == sorted(replicas)

    cli.ok("topic", "alter-config", topic_name, "retention.ms=654321", "cleanup.policy=compact")
    [doc] = json.loads(cli.ok("topic", "describe", topic_name, "--format", "json"))
    assert doc["configs"]["retention.ms"] == "654321"
    assert doc["configs"]["cleanup.policy"] == "compact"
    assert [p["partition"] for p in doc["partitions"]] == [0, 1, 2]

    cli.ok("topic", "alter-config", topic_name, "--delete", "cleanup.policy")
    [doc] = json.loads(cli.ok("topic", "describe", topic_name, "--format", "json"))
    assert "cleanup.policy" not in doc["configs"]
    assert doc["configs"]["retention.ms"] == "654321"

    assert cli.ok("topic", "delete", topic_name) == f"Deleted topic {topic_name}.\n"
    eventually(lambda: _assert_listed(cli, topic_name, False))


def _assert_listed(cli: Cli, topic: str, expected: bool) -> bool:
    assert (topic in cli.lines("topic", "list")) is expected
    return True


def test_produce_then_consume_text_and_json(cli: Cli, topic_name: str) -> None:
    create(cli, topic_name, 1)
    sent = [f"key-{i}:value {i} ünïcode" for i in range(20)]
    produce = ("--key-separator", ":", "--header", "h=v", "--header", "trace=1")
    out = cli.ok("produce", topic_name, *produce, "--acks", "all", "--compression", "gzip",
                 stdin="\n".join(sent) + "\n")  # fmt: skip
    assert out == ""

    first20 = ("--from-beginning", "--max-messages", "20", "--timeout-ms", "20000")
    keyed = cli.lines("consume", topic_name, *first20, "--print-key", "--key-separator", ":")
    assert keyed == sent
    assert cli.lines("consume", topic_name, *first20) == [s.split(":", 1)[1] for s in sent]

    records = [
        json.loads(r) for r in cli.lines("consume", topic_name, *first20, "--format", "json")
    ]
    assert [r["offset"] for r in records] == list(range(20))
    assert [(r["key"], r["value"]) for r in records] == [tuple(s.split(":", 1)) for s in sent]
    now_ms = time.time() * 1000
    for r in records:
        assert (r["topic"], r["partition"]) == (topic_name, 0)
        assert r["headers"] == [["h", "v"], ["trace", "1"]]
        assert abs(r["timestamp"] - now_ms) < 120_000


def test_partition_offset_and_idle_timeout(cli: Cli, topic_name: str) -> None:
    create(cli, topic_name, 2)
    cli.ok("produce", topic_name, "--partition", "1", stdin="a\nb\nc\nd\n")
    cli.ok("produce", topic_name, "--partition", "0", "--acks", "1", stdin="x\n")

    def consume(*args: str) -> list[str]:
        return cli.lines("consume", topic_name, *args, "--timeout-ms", "5000")

    p1, p1_from_2, p0, both, last = side_by_side(  # independent: run them at once
        lambda: consume("--partition", "1", "--from-beginning", "--max-messages", "4"),
        lambda: consume("--partition", "1", "--offset", "2", "--max-messages", "2"),
        lambda: consume("--partition", "0", "--from-beginning"),
        lambda: consume("--from-beginning", "--max-messages", "5"),
        lambda: consume("--partition", "1", "--offset", "3", "--format", "json"),
    )
    assert p1 == list("abcd")
    assert p1_from_2 == ["c", "d"]
    assert p0 == ["x"]
    assert sorted(both) == sorted("abcdx")
    records = [json.loads(r) for r in last]
    assert [(r["partition"], r["offset"], r["key"], r["value"]) for r in records] == [
        (1, 3, None, "d")
    ]

    started = time.monotonic()
    assert consume("--partition", "1", "--offset", "4") == []  # nothing after the end: idle exit
    # a hang check, not a speed check: each command gives up after its 10 s --timeout; six
    # Python start-ups side by side took 34 s on a loaded 2-core machine
    assert time.monotonic() - started < 75


def test_bad_input_gives_one_clean_line(cli: Cli, topic_name: str) -> None:
    assert "bad name!" in cli.fail("topic", "create", "bad name!", "--partitions", "1")
    cli.fail("topic", "create", topic_name, "--partitions", "0")
    cli.fail("topic", "create", topic_name, "--partitions", "1", "--config", "novalue")
    cli.fail("produce", topic_name, "--header", "novalue", stdin="x\n")
    cli.fail("consume", topic_name, "--group", "g", "--offset", "1")
    assert_clean_error(strom("no-such-command"))

    create(cli, topic_name, 1)
    assert topic_name in cli.fail("topic", "create", topic_name, "--partitions", "1")
    cli.fail("consume", topic_name, "--partition", "7", "--timeout-ms", "1000")
    assert "partition 7" in cli.fail("produce", topic_name, "--partition", "7", stdin="x\n")
    assert "does-not-exist" in cli.fail("topic", "describe", f"{topic_name}-does-not-exist")


UNREACHABLE_COMMANDS = [
    ("topic", "list"),
    ("topic", "describe", "t"),
    ("group", "list"),
    ("cluster", "info"),
    ("produce", "t"),
    ("consume", "t", "--from-beginning"),
]


def test_unreachable_broker_times_out_cleanly() -> None:
    """Every client command gives up on a dead address with one line naming it (a refused
    port is known at once; they still run side by side to keep the suite fast)."""
    from concurrent.futures import ThreadPoolExecutor

    cli = Cli(f"127.0.0.1:{free_port()}")
    started = time.monotonic()
    with ThreadPoolExecutor(len(UNREACHABLE_COMMANDS)) as pool:
        lines = list(pool.map(lambda cmd: cli.fail(*cmd, stdin="x\n"), UNREACHABLE_COMMANDS))
    for command, line in zip(UNREACHABLE_COMMANDS, lines, strict=True):
        assert "127.0.0.1" in line, (command, line)
    # a hang check, not a speed check: each command gives up after its 10 s --timeout; six
    # Python start-ups side by side took 34 s on a loaded 2-core machine
    assert time.monotonic() - started < 75


def test_cluster_info(cli: Cli) -> None:
    [doc] = json.loads(cli.ok("cluster", "info", "--format", "json"))
    # one broker, or a test cluster's brokers 1..N at the bootstrap addresses in that order
    expected = [(h, int(p)) for h, p in (a.rsplit(":", 1) for a in cli.bootstrap.split(","))]
    assert doc["cluster_id"]
    assert [(b["host"], b["port"]) for b in sorted(doc["brokers"], key=lambda b: b["id"])] == (
        expected)
    assert doc["controller"] in {b["id"] for b in doc["brokers"]}
    assert f"Cluster ID: {doc['cluster_id']}" in cli.lines("cluster", "info")


def test_cluster_health(cli: Cli) -> None:
    [doc] = json.loads(cli.ok("cluster", "health", "--format", "json"))
    assert doc["healthy"] is True
    assert (doc["offline_partitions"], doc["under_replicated_partitions"]) == ([], [])
    assert doc["controller"] in doc["brokers"]
    assert cli.lines("cluster", "health")[0] == "Healthy: true"
