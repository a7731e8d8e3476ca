"""Exactly-once consume-transform-produce: the application is killed with SIGKILL at random
points and restarted; the output, read with read_committed, holds exactly one result per
input record, in order per key. Then the same with the broker killed once mid-stream."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from strom.testing import BrokerProcess
from tests.integration.clients import create_topic, produce
from tests.integration.txn_helpers import read_to_end

N = 10_000
KEYS = 20
ROOT = Path(__file__).resolve().parents[2]


def _start_app(bootstrap: str, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.integration.eos_app", bootstrap, "in", "out", "eos-g",
             "eos-tx", "25"], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ),
        )  # fmt: skip


def _committed_total(bootstrap: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "eos-g"})
    try:
        tps = c.committed([TopicPartition("in", p) for p in (0, 1)], 10)
    except Exception:  # the broker is restarting
        return -1
    finally:
        c.close()
    return sum(max(tp.offset, 0) for tp in tps)


def _kill(app: subprocess.Popen[bytes]) -> None:
    os.kill(app.pid, signal.SIGKILL)
    app.wait(10)


@pytest.mark.slow
def test_consume_transform_produce_survives_kill_9(tmp_path: Path) -> None:
    rng = random.Random(7)
    proc = BrokerProcess(tmp_path / "data",
                         settings={"group.initial.rebalance.delay.ms": "0"}).start()  # fmt: skip
    app = None
    try:
        bs = proc.bootstrap
        create_topic(bs, "in", partitions=2)
        create_topic(bs, "out", partitions=2)
        produce(bs, "in", ({"key": b"k%d" % (i % KEYS), "value": b"%d" % i} for i in range(N)))
        log = tmp_path / "app.log"
        deadline = time.monotonic() + 240
        kill_points: list[int] = []
        app = _start_app(bs, log)
        for kill, target in enumerate(sorted(rng.sample(range(500, N - 2000), 4))):
            while (progress := _committed_total(bs)) < target:
                assert time.monotonic() < deadline, f"stuck at {progress} of {N}"
                assert app.poll() is None, log.read_text()[-3000:]
                time.sleep(0.05)
            time.sleep(rng.uniform(0, 0.1))  # most likely inside a transaction
            _kill(app)
            kill_points.append(progress)
            if kill == 1:  # once, the broker dies with the application
                proc.kill()
                proc.start()
            app = _start_app(bs, log)
        while (progress := _committed_total(bs)) < N:
            assert time.monotonic() < deadline, f"stuck at {progress} of {N}"
            assert app.poll() is None, log.read_text()[-3000:]
            time.sleep(0.1)
        assert len(set(kill_points)) == 4 and max(kill_points) < N, kill_points
        _kill(app)
        app = None
        out = read_to_end(bs, "out", [0, 1], "read_committed", timeout=60)
        values = [m.value() for m in out]
        assert len(values) == N, f"{len(values)} results for {N} inputs"
        assert sorted(values) == sorted(b"out-%d" % i for i in range(N))
        per_key: dict[bytes, list[int]] = {}
        for m in out:
            per_key.setdefault(m.key(), []).append(int(m.value()[4:]))
        for key, seen in per_key.items():
            assert seen == sorted(seen), f"{key!r} out of order"
    finally:
        if app is not None and app.poll() is None:
            _kill(app)
        proc.stop()
