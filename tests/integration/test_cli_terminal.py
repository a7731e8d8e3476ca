"""The CLI on a real terminal (a pseudo-terminal of a forced width, issue 21): ``group
describe`` with a live member keeps GROUP, TOPIC, PARTITION, the offsets and LAG whole at 80
and 120 columns; only the consumer id, host and client id narrow (and wrap)."""

from __future__ import annotations

import errno
import fcntl
import os
import re
import struct
import subprocess
import sys
import termios
import time

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.integration.cli_helpers import Cli

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
HEADERS = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
           "CONSUMER-ID", "HOST", "CLIENT-ID"]  # fmt: skip


def in_terminal(args: list[str], columns: int) -> str:
    """stdout of ``strom ARGS`` written to a pseudo-terminal ``columns`` wide."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = {**os.environ, "COLUMNS": str(columns), "LINES": "50", "NO_COLOR": "1",
           "TERM": "xterm"}  # fmt: skip
    env.pop("STROM_BROKERS", None)
    proc = subprocess.Popen([sys.executable, "-m", "strom", *args], stdout=slave,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env)
    os.close(slave)
    out = bytearray()
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError as exc:  # EIO: the child closed the terminal
            if exc.errno != errno.EIO:
                raise
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()
    return ANSI.sub("", out.decode()).replace("\r\n", "\n")


@pytest.fixture
def member(broker, topic_name: str):  # type: ignore[no-untyped-def]
    """A live member (long client id) of a group over 6 partitions, offsets committed."""
    cli = Cli(str(broker.bootstrap))
    topic = f"clickstream-events-{topic_name[-8:]}"  # the fixture's unique suffix
    cli.ok("topic", "create", topic, "-p", "6")
    cli.ok("produce", topic, stdin="".join(f"v{i}\n" for i in range(60)))
    group = f"click-reader-analytics-{topic_name[-8:]}"
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                         "client.id": "click-reader-service-instance-7",
                         "enable.auto.commit": False})  # fmt: skip
    consumer.subscribe([topic])
    deadline = time.monotonic() + 60
    while not consumer.assignment():
        assert time.monotonic() < deadline, "no assignment"
        consumer.poll(0.2)
    consumer.commit(offsets=[TopicPartition(topic, p, 3) for p in range(6)], asynchronous=False)
    try:
        yield cli, group, topic
    finally:
        consumer.close()


@pytest.mark.parametrize("columns", [80, 120])
def test_group_describe_keeps_the_key_columns_whole(member, columns: int) -> None:  # type: ignore[no-untyped-def]
    cli, group, topic = member
    out = in_terminal(["group", "describe", group, "-b", cli.bootstrap], columns)
    lines = [line for line in out.splitlines() if line.strip()]
    assert "…" not in out, out
    header = next(line for line in lines if line.split()[:1] == ["GROUP"])
    assert header.split() == HEADERS, out
    rows = [line.split() for line in lines if line.split()[:1] == [group]]
    assert [r[:3] for r in rows] == [[group, topic, str(p)] for p in range(6)], out
    for r in rows:
        current, end, lag = int(r[3]), int(r[4]), int(r[5])
        assert current == 3 and lag == end - current, out
        assert r[6].startswith("click-reader"), out  # the member's id, whole or wrapped
    assert lines[-1] == f"TOTAL-LAG {sum(int(r[5]) for r in rows)}"
