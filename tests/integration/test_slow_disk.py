"""A slow disk (issue 28): fsyncs of one partition take seconds; the event loop never waits.

The stall is injected in the storage I/O seam (:mod:`strom.testing.diskfault`): every fsync of
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

import pytest
from confluent_kafka import Consumer, TopicPartition

from strom.testing import BrokerProcess
from strom.testing.diskfault import DiskFaults
from strom.testing.workload import QUIET
from tests.integration.test_disk_faults import create, producer, send

STALL = 3.0
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
        p_fast, p_slow = producer(broker.bootstrap), producer(broker.bootstrap)
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

        def slow_writer() -> None:
            for i in range(2):  # the second waits behind the first's fsync as well
                began = time.monotonic()
                assert send(p_slow, "slow", b"s%d-" % i + b"x" * 40_000) is None
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
        # acks=all with flush.messages=1: each acknowledgement waited for its stalled fsync
        assert min(slow_took) >= STALL * 0.9, slow_took
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
