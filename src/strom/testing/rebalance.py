"""Measuring rebalance pauses: how long a group's other members stop reading when one goes.

A *pause* is what KIP-848 removes: under the classic protocol's eager rebalance every member
gives up all its partitions while the group rebalances, so a member leaving (or crashing and
being found out) stops everyone; under the consumer protocol only the partitions that move
change hands and the others keep reading. Measured from the outside, with real clients:

- :class:`SteadyProducer` writes to every partition of a topic at a steady pace (one record per
  partition every ``interval_s``), so a partition that is being read yields a record that often;
- :class:`TimedConsumer` polls one confluent-kafka consumer in its own thread and records when
  each record arrived (monotonic seconds) per partition;
- :func:`longest_gap` is, over the partitions a surviving member held before an event and
  still holds after it, the longest stretch without a record in a window around the event.

:func:`consumer_process` starts a member in a child process, for a crash (``kill -9``).
Used by the integration tests (``tests/integration/test_consumer_protocol.py``) and the
benchmark ``benchmarks/rebalance_pause.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from strom.testing.workload import QUIET


class SteadyProducer:
    """Writes one record to each of ``partitions`` every ``interval_s`` until :meth:`stop`."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, interval_s: float = 0.02) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.interval_s = interval_s
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="steady-producer", daemon=True)

    def start(self) -> SteadyProducer:
        self._thread.start()
        return self

    def _run(self) -> None:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 0,
                             "logger": QUIET})  # fmt: skip
        n = 0
        next_at = time.monotonic()
        while not self._stop.is_set():
            for p in range(self.partitions):
                producer.produce(self.topic, f"{p}:{n}".encode(), partition=p)
            n += 1
            self.sent += self.partitions
            producer.poll(0)
            next_at += self.interval_s
            self._stop.wait(max(0.0, next_at - time.monotonic()))
        producer.flush(10)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


class TimedConsumer:
    """One member of ``group`` reading ``topic`` in its own thread; ``arrivals[partition]`` is
    the list of monotonic times records of that partition arrived."""

    def __init__(self, bootstrap: str, group: str, topic: str, name: str,
                 config: Mapping[str, Any] | None = None) -> None:  # fmt: skip
        self.conf: dict[str, Any] = {
            "bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
            "auto.offset.reset": "latest", "fetch.wait.max.ms": 50, "logger": QUIET,
            **(config or {}),
        }  # fmt: skip
        self.topic = topic
        self.name = name
        self.arrivals: dict[int, list[float]] = {}
        self.assignment: set[int] = set()
        self.records = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._close = True
        self._thread = threading.Thread(target=self._run, name=f"consumer-{name}", daemon=True)

    def start(self) -> TimedConsumer:
        self._thread.start()
        return self

    def _run(self) -> None:
        from confluent_kafka import Consumer

        try:
            consumer = Consumer(self.conf)
            consumer.subscribe([self.topic])
            while not self._stop.is_set():
                msg = consumer.poll(0.02)
                self.assignment = {tp.partition for tp in consumer.assignment()}
                if msg is None or msg.error():
                    continue
                self.arrivals.setdefault(int(msg.partition() or 0), []).append(time.monotonic())
                self.records += 1
            if self._close:
                consumer.close()
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.error = exc

    def stop(self, close: bool = True) -> None:
        """Stop polling; ``close`` leaves the group (else the member just goes silent)."""
        self._close = close
        self._stop.set()
        self._thread.join(30)
        if self.error is not None:
            raise AssertionError(f"consumer {self.name} failed: {self.error!r}")


def longest_gap(members: Iterable[TimedConsumer], partitions: Mapping[str, set[int]],
                start: float, end: float) -> float:  # fmt: skip
    """The longest time, in ``[start, end]``, any of ``members`` went without a record of a
    partition it holds throughout (``partitions[member.name]``)."""
    worst = 0.0
    for member in members:
        for p in partitions.get(member.name, set()):
            times = [start] + [t for t in member.arrivals.get(p, []) if start <= t <= end] + [end]
            worst = max(worst, max(b - a for a, b in zip(times, times[1:], strict=False)))
    return worst


_CHILD = textwrap.dedent("""
    import json, sys, time
    from confluent_kafka import Consumer
    conf = json.loads(sys.argv[1])
    c = Consumer(conf)
    c.subscribe([sys.argv[2]])
    while True:
        c.poll(0.05)
        if c.assignment():
            print("ASSIGNED", ",".join(str(tp.partition) for tp in c.assignment()), flush=True)
""")


def consumer_process(bootstrap: str, group: str, topic: str,
                     config: Mapping[str, Any] | None = None) -> subprocess.Popen[str]:  # fmt: skip
    """A member of ``group`` in a child process (to be killed with SIGKILL); it prints
    ``ASSIGNED p,q`` lines while it holds partitions."""
    import json

    conf = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "latest",
            "fetch.wait.max.ms": 50, **(config or {})}  # fmt: skip
    return subprocess.Popen([sys.executable, "-u", "-c", _CHILD, json.dumps(conf), topic],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=dict(os.environ))  # fmt: skip


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)
