"""A slow disk (issue 28): fsyncs or writes of one partition take seconds; the event loop does
not wait for them (see :mod:`strom.storage.slow_disk` for the one write it does wait for).

The fsync stall is injected in the storage I/O seam (:mod:`strom.testing.diskfault`): every fsync of
the ``slow`` partition's files takes :data:`STALL` seconds. That topic has
``flush.messages=1``, so each of its appends is fsynced (by the flusher thread) before it is
acknowledged: its acknowledgement must wait for the stall (acks mean what they say). Meanwhile
a bystander producer on another topic, one request in flight at a time, and a bystander
consumer keep going: their requests are counted, and none may wait for anything like the
stall: their requests are counted, and the bystander producer's p99 latency during the stall
is measured against its p99 just before it, in the same run (printed; asserted far below the
stall, not against a tight bound that a loaded machine would break).
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from strom.testing import BrokerProcess
from strom.testing.diskfault import DiskFaults
from strom.testing.workload import QUIET
from tests.integration.test_disk_faults import create, producer, read_all, send

STALL = 3.0
WRITE_STALL = 2.0
pytestmark = pytest.mark.serial  # counts requests answered in a few seconds


def p99(latencies: list[float]) -> float:
    ordered = sorted(latencies)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def test_a_stalled_fsync_holds_its_own_acks_and_nobody_else(tmp_path: Path) -> None:
    faults = DiskFaults(tmp_path / "faults")
    broker = BrokerProcess(tmp_path / "data", log_file=tmp_path / "broker.log",
                           env=faults.environment())  # fmt: skip
    with broker:
        create(broker.bootstrap, "fast")
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": broker.bootstrap, "logger": QUIET})
        admin.create_topics([NewTopic("slow", 1, 1, config={"flush.messages": "1",
                                                             "segment.bytes": "65536"})])[
            "slow"].result(15)  # fmt: skip
        p_fast = producer(broker.bootstrap)
        # the second slow append waits for two stalled fsyncs (the rolled segment's and its
        # own, one flusher thread) and more on a loaded machine: far from a 10 s timeout
        p_slow = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "retries": 0,
                           "enable.idempotence": False, "linger.ms": 0,
                           "message.timeout.ms": 60_000, "logger": QUIET})  # fmt: skip
        assert send(p_fast, "fast", b"warm") is None and send(p_slow, "slow", b"warm") is None
        fast_latencies: list[float] = []
        fetched = [0]
        stop = threading.Event()

        def bystander_consumer() -> None:
            c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "by",
                          "logger": QUIET, "fetch.wait.max.ms": 50})  # fmt: skip
            c.assign([TopicPartition("fast", 0, 0)])
            try:
                while not stop.is_set():
                    msg = c.poll(0.1)
                    if msg is not None and msg.error() is None:
                        fetched[0] += 1
            finally:
                c.close()

        reader = threading.Thread(target=bystander_consumer)
        reader.start()  # consuming already while the baseline is measured
        baseline: list[float] = []  # the bystander's latencies before the stall
        began = time.monotonic()
        while time.monotonic() - began < 2.0:
            sent = time.monotonic()
            assert send(p_fast, "fast", b"before") is None
            baseline.append(time.monotonic() - sent)
        # the partition's segment files only (one fsync per flush)
        rule = faults.stall(STALL, ops=("fsync",),
                            path=f"re:{re.escape(str(broker.data_dir / 'slow-0'))}/\\d+\\.log$")

        slow_took: list[float] = []
        errors: list[Any] = []

        def slow_writer() -> None:
            for i in range(2):  # the second waits behind the first's fsync as well
                began = time.monotonic()
                err = send(p_slow, "slow", b"s%d-" % i + b"x" * 40_000)
                if err is not None:
                    errors.append(err)
                    return
                slow_took.append(time.monotonic() - began)

        writer = threading.Thread(target=slow_writer)
        before_fetched = fetched[0]
        began = time.monotonic()
        writer.start()
        i = 0
        while writer.is_alive() or time.monotonic() - began < STALL:
            sent = time.monotonic()
            assert send(p_fast, "fast", b"f%d" % i) is None
            fast_latencies.append(time.monotonic() - sent)
            i += 1
        writer.join()
        stop.set()
        reader.join()
        during = time.monotonic() - began
        assert faults.struck(rule) >= 2, "the fsync stall never happened"
        assert not errors, errors
        # acks=all with flush.messages=1: each acknowledgement waited for its stalled fsync
        assert len(slow_took) == 2 and min(slow_took) >= STALL * 0.9, slow_took
        # the bystanders never waited for it: many round trips while the disk stalled, and
        # none as long as a fraction of the stall
        assert len(fast_latencies) >= 5 * during, (len(fast_latencies), during)
        assert max(fast_latencies) < STALL / 2, max(fast_latencies)
        assert fetched[0] - before_fetched >= len(fast_latencies) // 2
        p99_before, p99_during = p99(baseline), p99(fast_latencies)
        print(f"bystander produce p99: {p99_before * 1000:.1f} ms before the stall, "
              f"{p99_during * 1000:.1f} ms during it ({p99_during / p99_before:.2f}x; "
              f"{len(fast_latencies)} requests in {during:.1f} s, stall {STALL} s)")
        assert p99_during < STALL / 6, (p99_before, p99_during)
        faults.clear()


def test_a_stalled_write_holds_its_own_acks_and_nobody_else(tmp_path: Path) -> None:
    """Every ``write`` of one partition's segment files takes :data:`WRITE_STALL` seconds.

    The first stalled write is on the event loop (nothing said the disk was slow before it):
    it marks the log directory slow, and every later append to the directory is written by a
    writer thread while the loop goes on. The slow partition's acks=all and acks=1 produces
    are acknowledged only once their bytes are in the segment file (checked at each ack);
    while one is being written the broker keeps answering, and its high watermark does not
    cover the record. A bystander producer on another topic (same directory) and a bystander
    consumer keep going: the bystander's p99 during the stalls is printed against its p99
    just before them and asserted far below the stall, and only one of its requests (the one
    behind that first write) may have waited for the disk."""
    faults = DiskFaults(tmp_path / "faults")
    broker = BrokerProcess(tmp_path / "data", log_file=tmp_path / "broker.log",
                           env=faults.environment())  # fmt: skip
    with broker:
        create(broker.bootstrap, "fast")
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": broker.bootstrap, "logger": QUIET})
        # 40 kB records in 64 kB segments: the second stalled append rolls a segment first
        admin.create_topics([NewTopic("slow", 1, 1, config={"segment.bytes": "65536"})])[
            "slow"].result(15)  # fmt: skip
        p_fast, p_all = producer(broker.bootstrap), producer(broker.bootstrap)
        p_one = Producer({"bootstrap.servers": broker.bootstrap, "acks": "1", "retries": 0,
                          "enable.idempotence": False, "linger.ms": 0,
                          "message.timeout.ms": 15_000, "logger": QUIET})  # fmt: skip
        assert send(p_fast, "fast", b"warm") is None and send(p_all, "slow", b"warm") is None
        assert send(p_one, "slow", b"warm1") is None
        fetched = [0]
        stop = threading.Event()

        def bystander_consumer() -> None:
            c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "by",
                          "logger": QUIET, "fetch.wait.max.ms": 50})  # fmt: skip
            c.assign([TopicPartition("fast", 0, 0)])
            try:
                while not stop.is_set():
                    msg = c.poll(0.1)
                    if msg is not None and msg.error() is None:
                        fetched[0] += 1
            finally:
                c.close()

        reader = threading.Thread(target=bystander_consumer)
        reader.start()
        baseline: list[float] = []
        began = time.monotonic()
        while time.monotonic() - began < 2.0:
            sent = time.monotonic()
            assert send(p_fast, "fast", b"before") is None
            baseline.append(time.monotonic() - sent)
        slow_dir = broker.data_dir / "slow-0"
        rule = faults.stall(WRITE_STALL, ops=("write",),
                            path=f"re:{re.escape(str(slow_dir))}/\\d+\\.log$")

        values = [b"s%d-" % i + b"x" * 40_000 for i in range(4)]
        slow_took: list[float] = []
        hidden: list[tuple[int, int]] = []  # (high watermark, records before) mid-write
        problems: list[str] = []

        def on_disk(value: bytes) -> bool:
            return any(value in f.read_bytes() for f in slow_dir.glob("*.log"))

        watcher = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "w",
                            "logger": QUIET})  # fmt: skip
        assert watcher.get_watermark_offsets(TopicPartition("slow", 0), timeout=10)[1] == 2

        def slow_writer() -> None:
            try:
                before = 2  # the warm-up records
                for i, (p, value) in enumerate(zip((p_all, p_all, p_one, p_one), values,
                                                   strict=True)):  # fmt: skip
                    out: list[Any] = []
                    began = time.monotonic()
                    p.produce("slow", value, partition=0,
                              on_delivery=lambda err, _m, out=out: out.append(err))  # fmt: skip
                    if i > 0:  # written off the loop: the broker answers meanwhile
                        time.sleep(WRITE_STALL / 4)
                        _low, high = watcher.get_watermark_offsets(TopicPartition("slow", 0),
                                                                   timeout=10)  # fmt: skip
                        p.poll(0)
                        if out:
                            problems.append(f"record {i} acknowledged during its write")
                        if time.monotonic() - began > WRITE_STALL * 0.9:
                            problems.append(f"the high watermark query waited for the disk "
                                            f"({time.monotonic() - began:.2f} s)")  # fmt: skip
                        hidden.append((high, before))
                    p.flush(15)
                    slow_took.append(time.monotonic() - began)
                    if out != [None]:
                        problems.append(f"record {i}: {out}")
                    elif not on_disk(value):  # acknowledged: it must be in the log's file
                        problems.append(f"record {i} acknowledged before it was written")
                    before += 1
            except Exception as exc:
                problems.append(repr(exc))

        writer = threading.Thread(target=slow_writer)
        before_fetched = fetched[0]
        fast_latencies: list[float] = []
        fast_sent: list[float] = []
        began = time.monotonic()
        writer.start()
        i = 0
        while writer.is_alive() or time.monotonic() - began < WRITE_STALL:
            sent = time.monotonic()
            assert send(p_fast, "fast", b"f%d" % i) is None
            fast_latencies.append(time.monotonic() - sent)
            fast_sent.append(sent - began)
            i += 1
        writer.join()
        stop.set()
        reader.join()
        watcher.close()
        during = time.monotonic() - began
        struck = faults.struck(rule)
        faults.clear()
        assert struck >= len(values), (f"the write stall struck {struck} times", problems)
        assert not problems, problems
        # each acknowledgement waited for its stalled write (acks mean what they say)
        assert len(slow_took) == len(values) and min(slow_took) >= WRITE_STALL * 0.9, slow_took
        # while a record was being written, the high watermark did not cover it
        assert hidden and all(high == n for high, n in hidden), hidden
        log_text = (tmp_path / "broker.log").read_text()
        assert "is slow (a write took" in log_text
        # the bystanders: many round trips, and only the one behind the first stalled write
        # (on the loop, before the directory was known slow) waited for the disk
        waited = [t for t in fast_latencies if t > WRITE_STALL / 2]
        assert len(waited) <= 1, [(round(at, 2), round(t, 2)) for at, t in
                                  zip(fast_sent, fast_latencies, strict=True) if t > WRITE_STALL / 2]
        assert len(fast_latencies) >= 5 * during, (len(fast_latencies), during)
        assert fetched[0] - before_fetched >= len(fast_latencies) // 2
        p99_before, p99_during = p99(baseline), p99(fast_latencies)
        print(f"bystander produce p99: {p99_before * 1000:.1f} ms before the write stalls, "
              f"{p99_during * 1000:.1f} ms during them ({p99_during / p99_before:.2f}x; "
              f"{len(fast_latencies)} requests in {during:.1f} s, {len(values)} writes stalled "
              f"{WRITE_STALL} s each, {len(waited)} request waited for one)")
        assert p99_during < WRITE_STALL / 6, (p99_before, p99_during)
        # every acknowledged record is in the log, in order, once
        assert read_all(broker.bootstrap, "slow") == [b"warm", b"warm1", *values]
