"""``strom consume`` against a real broker: templates, offsets, topics, JSON, exit codes, and
the group member that commits only what it has written (defect 2 of issue 12)."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime

import pytest

from tests.integration.cli_helpers import Cli, eventually, side_by_side


@pytest.fixture
def cli(broker) -> Cli:  # type: ignore[no-untyped-def]
    return Cli(str(broker.bootstrap))


def fill(cli: Cli, topic: str, partitions: int, rows: list[str], *produce: str) -> None:
    cli.ok("topic", "create", topic, "-p", str(partitions))
    cli.ok("produce", topic, *produce, stdin="".join(r + "\n" for r in rows))


def test_output_templates_and_json(cli: Cli, topic_name: str) -> None:
    fill(cli, topic_name, 1, [f"k{i}:v {i}" for i in range(3)], "-f", "%k:%v\\n", "-H", "h=1")
    before = int(time.time() * 1000) - 120_000
    tpl, js, b64, hexa = side_by_side(
        lambda: cli.lines("consume", topic_name, "-o", "start", "-e",
                          "-f", "%k %p %o %T %h %K %V|%v\\n"),
        lambda: cli.lines("consume", topic_name, "-o", "start", "-e", "--format", "json"),
        lambda: cli.lines("consume", topic_name, "-o", "start", "-e", "--format", "json",
                          "--value-encoding", "base64"),
        lambda: cli.lines("consume", topic_name, "-o", "start", "-e", "-f", "%v\\n",
                          "--value-encoding", "hex"),
    )
    parsed = [line.split("|")[0].split(" ") + [line.split("|")[1]] for line in tpl]
    assert [(p[0], p[1], p[2], p[4], p[5], p[6], p[7]) for p in parsed] == [
        (f"k{i}", "0", str(i), "h=1", "2", str(len(f"v {i}")), f"v {i}") for i in range(3)
    ]
    assert all(int(p[3]) > before for p in parsed)
    records = [json.loads(line) for line in js]
    for i, r in enumerate(records):
        assert (r["key"], r["value"], r["offset"], r["headers"]) == (f"k{i}", f"v {i}", i,
                                                                     [["h", "1"]])
        assert r["timestamp_type"] == "CreateTime"
        iso = datetime.strptime(r["timestamp_iso"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
        assert int(iso.timestamp() * 1000) == r["timestamp"]
    assert [base64.b64decode(json.loads(line)["value"]) for line in b64] == [
        f"v {i}".encode() for i in range(3)
    ]
    assert json.loads(b64[0])["key"] == base64.b64encode(b"k0").decode()
    assert [bytes.fromhex(h) for h in hexa] == [f"v {i}".encode() for i in range(3)]


def test_offsets_start_end_absolute_tail_and_time(cli: Cli, topic_name: str) -> None:
    fill(cli, topic_name, 2, [f"m{i}" for i in range(4)], "-p", "0")
    cli.ok("produce", topic_name, "-p", "1", stdin="p1-a\n")
    future = datetime.now(UTC).replace(year=datetime.now(UTC).year + 1).isoformat()

    def values(*args: str) -> list[str]:
        return cli.lines("consume", topic_name, "-p", "0", "-e", *args)

    start, end, absolute, tail, past, later, both = side_by_side(
        lambda: values("-o", "start"),
        lambda: values("-o", "end"),
        lambda: values("-o", "2"),
        lambda: values("-o", "-1"),
        lambda: values("-o", "@2000-01-01T00:00:00Z"),
        lambda: values("-o", f"@{future}"),
        lambda: cli.lines("consume", topic_name, "-e", "--from-beginning"),
    )
    assert start == past == ["m0", "m1", "m2", "m3"]
    assert end == later == []
    assert absolute == ["m2", "m3"]
    assert tail == ["m3"]
    assert sorted(both) == ["m0", "m1", "m2", "m3", "p1-a"]
    assert "invalid --offset" in cli.fail("consume", topic_name, "-o", "soon")


def test_several_topics_and_regex(cli: Cli, topic_name: str) -> None:
    a, b, other = f"{topic_name}-logs-a", f"{topic_name}-logs-b", f"{topic_name}-metrics"
    side_by_side(
        lambda: fill(cli, a, 1, ["a1", "a2"]),
        lambda: fill(cli, b, 1, ["b1"]),
        lambda: fill(cli, other, 1, ["x"]),
    )
    named, matched = side_by_side(
        lambda: cli.lines("consume", a, b, "-o", "start", "-e", "-f", "%t %v\\n"),
        lambda: cli.lines("consume", "--regex", f"{topic_name}-logs-.*", "-o", "start", "-e",
                          "-f", "%t %v\\n"),
    )
    expected = sorted([f"{a} a1", f"{a} a2", f"{b} b1"])
    assert sorted(named) == sorted(matched) == expected
    assert "no topic matches" in cli.fail("consume", "--regex", f"{topic_name}-nothing-.*")


def test_exit_codes_tell_caught_up_from_stopped_by_the_user(cli: Cli, topic_name: str) -> None:
    fill(cli, topic_name, 1, ["one"])
    done = cli.run("consume", topic_name, "-o", "start", "-e")
    assert (done.returncode, done.stdout) == (0, "one\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "strom", "consume", topic_name, "-o", "start",
         "-b", cli.bootstrap],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "one\n"  # it is running and has caught up
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    term = subprocess.Popen(
        [sys.executable, "-m", "strom", "consume", topic_name, "-o", "start",
         "-b", cli.bootstrap],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert term.stdout is not None
        assert term.stdout.readline() == "one\n"
        term.send_signal(signal.SIGTERM)
        _, err = term.communicate(timeout=30)
    finally:
        if term.poll() is None:
            term.kill()
    assert term.returncode == 143, err


def _blocked_writing(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/wchan") as fh:
            return "pipe_write" in fh.read()
    except OSError:
        return False


def _read_available(fd: int) -> bytes:
    """Everything in the pipe right now (the writer is stopped, so this is all it wrote)."""
    os.set_blocking(fd, False)
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


@pytest.mark.skipif(not os.path.exists("/proc/self/wchan"), reason="needs Linux /proc wchan")
def test_ctrl_c_with_slow_stdout_commits_only_what_was_written(cli: Cli, topic_name: str) -> None:
    """Defect 2: the offset was stored at poll, so the message being written when Ctrl-C came
    (killing the slow reader of the pipe too) was committed but never printed.

    The consumer writes 20 kB messages into a pipe nobody reads until it blocks; it is then
    stopped, everything it wrote is read, the reader end closed and Ctrl-C sent: the message
    it was writing can never be printed, so it must not be committed."""
    group = f"g-{topic_name}"
    rows = [f"m{i:02d}:" + "x" * 20_000 for i in range(40)]
    fill(cli, topic_name, 1, rows)
    proc = subprocess.Popen(
        [sys.executable, "-m", "strom", "consume", topic_name, "--group", group, "-o", "start",
         "-b", cli.bootstrap],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None
    try:
        eventually(lambda: _blocked_writing(proc.pid), timeout=60, interval=0.1)
        proc.send_signal(signal.SIGSTOP)
        out = _read_available(proc.stdout.fileno())
        proc.stdout.close()  # the reader is gone, as when Ctrl-C ends the whole pipeline
        proc.send_signal(signal.SIGINT)
        proc.send_signal(signal.SIGCONT)
        err = proc.communicate(timeout=60)[1].decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode in (0, 130), err
    assert "Traceback" not in err and "Exception ignored" not in err, err
    complete = out.split(b"\n")[:-1]  # the text after the last newline is a cut-off message
    assert complete == [r.encode() for r in rows[: len(complete)]]
    assert 1 <= len(complete) < len(rows)
    [row] = [r for r in json.loads(cli.ok("group", "describe", group, "--format", "json"))
             if r["topic"] == topic_name]  # fmt: skip
    committed = row["current_offset"]
    assert committed <= len(complete), (committed, len(complete))  # nothing unprinted committed
    assert committed >= len(complete) - 1  # at most the last printed one is read again
    again = cli.lines("consume", topic_name, "--group", group, "-n", "1", "--timeout-ms", "30000")
    assert again == [rows[committed]]


def test_kcat_size_field(cli: Cli, topic_name: str) -> None:
    """Issue 21: kcat's ``%S`` (the message's size: its value's length, -1 for null)."""
    fill(cli, topic_name, 1, ["", "a", "héllo"])
    out = cli.lines("consume", topic_name, "-o", "start", "-e", "-f", "%o %S %V\\n")
    assert out == ["0 0 0", "1 1 1", "2 6 6"]
