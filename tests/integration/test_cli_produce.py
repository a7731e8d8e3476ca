"""``strom produce`` against a real broker: no line lost, refused lines named, Java's partitions.

Each defect of issue 12 about produce is reproduced here first (see the test names).
"""

from __future__ import annotations

import base64
import json
import os
import re
from pathlib import Path

import pytest

from tests.integration.cli_helpers import Cli, side_by_side


@pytest.fixture
def cli(broker) -> Cli:  # type: ignore[no-untyped-def]
    return Cli(str(broker.bootstrap))


def consume_all(cli: Cli, topic: str, fmt: str = "json") -> list[dict[str, object]]:
    out = cli.ok("consume", topic, "-o", "start", "-e", "--format", fmt)
    return [json.loads(line) for line in out.splitlines()]


def lines_input(oversized: set[int], total: int = 10, size: int = 2000) -> str:
    return "".join(
        ("x" * size if i in oversized else f"car-{i:02d}:line {i}") + "\n"
        for i in range(1, total + 1)
    )


def test_an_oversized_line_is_reported_and_every_other_line_delivered(
    cli: Cli, topic_name: str
) -> None:
    """Defect 1: one line over the topic's limit used to stop produce and lose lines."""
    topics = [f"{topic_name}-{mode}" for mode in ("default", "skip", "stop")]
    side_by_side(*(
        (lambda t=t: cli.ok("topic", "create", t, "-p", "3", "-c", "max.message.bytes=1000"))
        for t in topics
    ))
    text = lines_input({4, 8})
    default, skip, stop = side_by_side(
        lambda: cli.run("produce", topics[0], "--key-separator", ":", stdin=text),
        lambda: cli.run("produce", topics[1], "--key-separator", ":", "--skip-errors",
                        stdin=text),
        lambda: cli.run("produce", topics[2], "--key-separator", ":", "--stop-on-error",
                        stdin=text),
    )
    expected = {f"line {i}" for i in range(1, 11)} - {"line 4", "line 8"}

    assert default.returncode == 1
    errors = default.stderr.strip().splitlines()
    assert "Traceback" not in default.stderr
    assert [re.match(r"strom: line (\d+): ", e).group(1) for e in errors[:2]] == ["4", "8"]
    for line in errors[:2]:
        assert "max.message.bytes=1000" in line and "2070 bytes" in line
    assert errors[2] == (
        f"strom: error: 2 of 10 record(s) not produced to '{topics[0]}': line(s) 4, 8"
    )
    got = consume_all(cli, topics[0])
    assert {r["value"] for r in got} == expected and len(got) == 8

    assert skip.returncode == 0
    assert len(skip.stderr.strip().splitlines()) == 2  # both lines still reported
    assert {r["value"] for r in consume_all(cli, topics[1])} == expected

    assert stop.returncode == 1
    assert "line 4" in stop.stderr and "line 8" not in stop.stderr
    assert "--stop-on-error" in stop.stderr.strip().splitlines()[-1]
    assert {r["value"] for r in consume_all(cli, topics[2])} == {"line 1", "line 2", "line 3"}


def test_a_line_the_broker_refuses_is_named_with_the_brokers_reason(
    cli: Cli, topic_name: str
) -> None:
    """Compressed, the client cannot know the batch size: the broker's refusal is reported,
    and the lines batched with the refused one are still delivered (retried alone). The -X
    settings make librdkafka put all 30 lines in one batch, as a user's own settings might:
    without the retry all 30 were lost."""
    cli.ok("topic", "create", topic_name, "-p", "1", "-c", "max.message.bytes=1200")
    rows = [base64.b64encode(os.urandom(300)).decode() for _ in range(30)]
    rows[6] = base64.b64encode(os.urandom(1500)).decode()  # ~2000 bytes, incompressible
    proc = cli.run(
        "produce", topic_name, "--compression", "gzip", "-X", "message.max.bytes=1000000",
        "-X", "batch.size=1000000", "-X", "linger.ms=200", stdin="\n".join(rows) + "\n",
    )
    assert proc.returncode == 1, proc.stderr
    assert len(proc.stderr.splitlines()) == 2, proc.stderr  # line 7, then the count
    first = proc.stderr.splitlines()[0]
    assert first.startswith("strom: line 7: not produced: the broker refused it: "), first
    assert "MSG_SIZE_TOO_LARGE" in first
    got = [r["value"] for r in consume_all(cli, topic_name)]
    assert sorted(got) == sorted(rows[:6] + rows[7:])


def test_keys_land_on_the_partition_kafka_python_chooses(cli: Cli, topic_name: str) -> None:
    """Defect 3: strom used librdkafka's CRC32 partitioner; Java and kafka-python use murmur2."""
    from kafka import KafkaProducer
    from kafka.partitioner.default import murmur2

    cli.ok("topic", "create", topic_name, "-p", "6")
    cars = [f"car-{i:02d}" for i in range(1, 21)]
    cli.ok("produce", topic_name, "-f", "%k:%v\\n",
           stdin="".join(f"{c}:strom\n" for c in cars))  # fmt: skip
    producer = KafkaProducer(bootstrap_servers=cli.bootstrap)
    try:
        for car in cars:
            producer.send(topic_name, key=car.encode(), value=b"kafka-python")
        producer.flush(30)
    finally:
        producer.close(10)
    records = consume_all(cli, topic_name)
    by_tool: dict[str, dict[str, int]] = {"strom": {}, "kafka-python": {}}
    for r in records:
        by_tool[str(r["value"])][str(r["key"])] = int(str(r["partition"]))
    assert by_tool["strom"] == by_tool["kafka-python"]
    assert by_tool["strom"] == {c: (murmur2(c.encode()) & 0x7FFFFFFF) % 6 for c in cars}
    assert by_tool["strom"]["car-01"] == (murmur2(b"car-01") & 0x7FFFFFFF) % 6


def test_templates_keys_headers_partitions_file_and_summary(
    cli: Cli, topic_name: str, tmp_path: Path
) -> None:
    cli.ok("topic", "create", topic_name, "-p", "3")
    source = tmp_path / "in.txt"
    source.write_text("1\tk1\tsrc=gps,trace=7\tfirst\n2\tk2\t\tsecond\nbad line\n0\tk3\ta=b\tthird\n")
    proc = cli.run("produce", topic_name, "-f", "%p\\t%k\\t%H\\t%v\\n", "--file", str(source),
                   "-H", "tool=cli", "-v")  # fmt: skip
    assert proc.returncode == 1
    err = proc.stderr.splitlines()
    assert err[0].startswith("strom: line 3: not produced: expected '\\t' after the partition")
    assert err[1].startswith("Produced 3 of 4 message(s) (")
    assert err[1].endswith("partitions: 0 (1), 1 (1), 2 (1)")
    records = {r["value"]: r for r in consume_all(cli, topic_name)}
    assert set(records) == {"first", "second", "third"}
    assert (records["first"]["partition"], records["first"]["key"]) == (1, "k1")
    assert records["first"]["headers"] == [["tool", "cli"], ["src", "gps"], ["trace", "7"]]
    assert records["second"]["headers"] == [["tool", "cli"]]
    assert (records["third"]["partition"], records["third"]["headers"]) == (
        0, [["tool", "cli"], ["a", "b"]])

    fixed = f"{topic_name}-fixed"
    cli.ok("topic", "create", fixed, "-p", "3")
    cli.ok("produce", fixed, "-k", "car-07", stdin="a\nb\nc\n")
    got = consume_all(cli, fixed)
    assert [(r["key"], r["value"]) for r in got] == [("car-07", v) for v in "abc"]
    assert len({r["partition"] for r in got}) == 1


def test_bad_templates_and_options_are_one_line(cli: Cli, topic_name: str) -> None:
    cases = [
        (("-f", "%k%v\\n"), "separator"),
        (("-f", "%k:%x\\n"), "unknown field %x"),
        (("-f", "%k\\n"), "%v"),
        (("--file", "/nonexistent/in.txt"), "cannot read /nonexistent/in.txt"),
        (("-X", "nonsense"), "expected KEY=VALUE"),
    ]
    results = side_by_side(*(
        (lambda a=a: cli.fail("produce", topic_name, *a, stdin="x\n")) for a, _ in cases
    ))
    for (args, fragment), line in zip(cases, results, strict=True):
        assert fragment in line, (args, line)
