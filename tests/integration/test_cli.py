"""The ``strom`` CLI run as a subprocess against a real broker, parsed as a script would."""

from __future__ import annotations

import json
import time

import pytest
from tests.integration.cli_helpers import assert_clean_error, eventually, ok, strom

from strom.testing import free_port


@pytest.fixture
def boot(broker) -> str:  # type: ignore[no-untyped-def]
    return str(broker.bootstrap)


def create(boot: str, topic: str, partitions: int, *extra: str) -> None:
    out = ok(strom("topic", "create", topic, "--partitions", str(partitions), *extra,
                   "--bootstrap-server", boot))
    assert out.strip() == f"Created topic {topic}."


def parse_describe(output: str) -> tuple[dict[str, str], list[dict[str, str]]]:
    """(header fields, partition lines' fields) of Kafka's describe format."""
    rows = output.splitlines()
    header = dict(f.split(": ", 1) if ": " in f else (f.rstrip(":"), "")
                  for f in rows[0].split("\t"))
    parts = [dict(f.split(": ", 1) for f in row.strip("\t").split("\t"))
             for row in rows[1:] if row.startswith("\t")]
    return header, parts


def test_topic_create_list_describe_alter_delete(boot: str, topic_name: str) -> None:
    create(boot, topic_name, 3, "--config", "retention.ms=123456")

    names = eventually(lambda: _listed(boot, topic_name))
    assert topic_name in names
    listed = json.loads(ok(strom("topic", "list", "--format", "json", "--bootstrap-server", boot)))
    assert {"name": topic_name, "partitions": 3} in listed

    header, parts = parse_describe(ok(strom("topic", "describe", topic_name,
                                            "--bootstrap-server", boot)))
    assert header["Topic"] == topic_name
    assert header["PartitionCount"] == "3"
    assert header["ReplicationFactor"] == "1"
    assert header["TopicId"] not in ("", "-")
    assert "retention.ms=123456" in header["Configs"].split(",")
    assert [p["Partition"] for p in parts] == ["0", "1", "2"]
    for p in parts:
        assert p["Topic"] == topic_name
        assert p["Replicas"] == p["Leader"] == p["Isr"]

    ok(strom("topic", "alter-config", topic_name, "retention.ms=654321", "cleanup.policy=compact",
             "--bootstrap-server", boot))
    doc = json.loads(ok(strom("topic", "describe", topic_name, "--format", "json",
                              "--bootstrap-server", boot)))
    assert doc["configs"]["retention.ms"] == "654321"
    assert doc["configs"]["cleanup.policy"] == "compact"
    assert [p["partition"] for p in doc["partitions"]] == [0, 1, 2]

    ok(strom("topic", "alter-config", topic_name, "--delete", "cleanup.policy",
             "--bootstrap-server", boot))
    doc = json.loads(ok(strom("topic", "describe", topic_name, "--format", "json",
                              "--bootstrap-server", boot)))
    assert "cleanup.policy" not in doc["configs"]
    assert doc["configs"]["retention.ms"] == "654321"

    assert ok(strom("topic", "delete", topic_name, "--bootstrap-server", boot)).strip() == (
        f"Deleted topic {topic_name}."
    )
    eventually(lambda: _not_listed(boot, topic_name))


def _listed(boot: str, topic: str) -> list[str]:
    names = ok(strom("topic", "list", "--bootstrap-server", boot)).splitlines()
    assert topic in names
    return names


def _not_listed(boot: str, topic: str) -> None:
    assert topic not in ok(strom("topic", "list", "--bootstrap-server", boot)).splitlines()


def test_produce_then_consume_text_and_json(boot: str, topic_name: str) -> None:
    create(boot, topic_name, 1)
    sent = [f"key-{i}:value {i} ünïcode" for i in range(20)]
    out = ok(strom("produce", topic_name, "--key-separator", ":", "--header", "h=v",
                   "--header", "trace=1", "--acks", "all", "--compression", "gzip",
                   "--bootstrap-server", boot, stdin="\n".join(sent) + "\n"))
    assert out == ""

    text = ok(strom("consume", topic_name, "--from-beginning", "--max-messages", "20",
                    "--print-key", "--key-separator", ":", "--timeout-ms", "20000",
                    "--bootstrap-server", boot))
    assert text.splitlines() == sent

    values = ok(strom("consume", topic_name, "--from-beginning", "--max-messages", "20",
                      "--timeout-ms", "20000", "--bootstrap-server", boot))
    assert values.splitlines() == [s.split(":", 1)[1] for s in sent]

    records = [json.loads(line) for line in ok(strom(
        "consume", topic_name, "--from-beginning", "--max-messages", "20", "--format", "json",
        "--timeout-ms", "20000", "--bootstrap-server", boot)).splitlines()]
    assert [r["offset"] for r in records] == list(range(20))
    assert [(r["key"], r["value"]) for r in records] == [tuple(s.split(":", 1)) for s in sent]
    now_ms = time.time() * 1000
    for r in records:
        assert r["topic"] == topic_name
        assert r["partition"] == 0
        assert r["headers"] == [["h", "v"], ["trace", "1"]]
        assert abs(r["timestamp"] - now_ms) < 120_000


def test_partition_offset_and_idle_timeout(boot: str, topic_name: str) -> None:
    create(boot, topic_name, 2)
    ok(strom("produce", topic_name, "--partition", "1", "--bootstrap-server", boot,
             stdin="a\nb\nc\nd\n"))
    ok(strom("produce", topic_name, "--partition", "0", "--acks", "1", "--bootstrap-server", boot,
             stdin="x\n"))

    def consume(*args: str) -> list[str]:
        return ok(strom("consume", topic_name, *args, "--timeout-ms", "5000",
                        "--bootstrap-server", boot)).splitlines()

    assert consume("--partition", "1", "--from-beginning", "--max-messages", "4") == list("abcd")
    assert consume("--partition", "1", "--offset", "2", "--max-messages", "2") == ["c", "d"]
    assert consume("--partition", "0", "--from-beginning") == ["x"]
    assert sorted(consume("--from-beginning", "--max-messages", "5")) == sorted("abcdx")
    records = [json.loads(r) for r in consume("--partition", "1", "--offset", "3", "--format",
                                                "json")]
    assert [(r["partition"], r["offset"], r["key"], r["value"]) for r in records] == [
        (1, 3, None, "d")
    ]

    started = time.monotonic()
    assert consume("--partition", "1", "--offset", "4") == []  # nothing after the end: idle
    assert time.monotonic() - started < 30


def test_bad_input_gives_one_clean_line(boot: str, topic_name: str) -> None:
    line = assert_clean_error(strom("topic", "create", "bad name!", "--partitions", "1",
                                    "--bootstrap-server", boot))
    assert "bad name!" in line
    assert_clean_error(strom("topic", "create", topic_name, "--partitions", "0",
                             "--bootstrap-server", boot))
    assert_clean_error(strom("topic", "create", topic_name, "--bootstrap-server", boot))
    assert_clean_error(strom("topic", "create", topic_name, "--partitions", "1", "--config",
                             "novalue", "--bootstrap-server", boot))
    assert_clean_error(strom("produce", topic_name, "--header", "novalue",
                             "--bootstrap-server", boot, stdin="x\n"))
    assert_clean_error(strom("consume", topic_name, "--group", "g", "--offset", "1",
                             "--bootstrap-server", boot))
    assert_clean_error(strom("no-such-command"))

    create(boot, topic_name, 1)
    line = assert_clean_error(strom("topic", "create", topic_name, "--partitions", "1",
                                    "--bootstrap-server", boot))
    assert topic_name in line
    assert_clean_error(strom("consume", topic_name, "--partition", "7", "--timeout-ms", "1000",
                             "--bootstrap-server", boot))


@pytest.mark.parametrize(
    "command",
    [
        ("topic", "list"),
        ("topic", "describe", "t"),
        ("group", "list"),
        ("cluster", "info"),
        ("produce", "t"),
        ("consume", "t", "--from-beginning"),
    ],
)
def test_unreachable_broker_times_out_cleanly(command: tuple[str, ...]) -> None:
    started = time.monotonic()
    proc = strom(*command, "--bootstrap-server", f"127.0.0.1:{free_port()}", stdin="x\n",
                 timeout=40)
    elapsed = time.monotonic() - started
    line = assert_clean_error(proc)
    assert "127.0.0.1" in line
    assert elapsed < 20, elapsed


def test_cluster_info(boot: str) -> None:
    doc = json.loads(ok(strom("cluster", "info", "--format", "json", "--bootstrap-server", boot)))
    host, port = boot.rsplit(":", 1)
    assert doc["cluster_id"]
    assert [(b["host"], b["port"]) for b in doc["brokers"]] == [(host, int(port))]
    assert doc["controller"] == doc["brokers"][0]["id"]
    text = ok(strom("cluster", "info", "--bootstrap-server", boot))
    assert f"Cluster ID: {doc['cluster_id']}" in text.splitlines()
