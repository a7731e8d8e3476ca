"""Share groups (ShareFetch + acknowledge) against a classic consumer group, same data, same run.

Starts one strom broker, produces ``--messages`` records of ``--size`` bytes to a topic of
``--partitions`` partitions, then reads all of them back three ways, each in a new group:

- ``classic``: one confluent-kafka Consumer in a classic group (subscribe, auto commit) — the
  reference;
- ``share_1``: one ShareConsumer (implicit acknowledgement: each poll's records are accepted by
  the next poll, piggy-backed on ShareFetch, and persisted to ``__share_group_state`` before
  the broker answers);
- ``share_N``: ``--consumers`` ShareConsumers in threads of this process, sharing the topic.

Every value is checked to arrive (once for the classic group and the single share consumer;
the share group's deliveries are counted per distinct value). Prints ONE JSON line with msgs/s
(first record to last), broker CPU seconds per million records, and the ratios of each share
run to the classic one (progress on stderr). Read only the ratios.

    python benchmarks/share_throughput.py [--messages N] [--size B] [--partitions N] [--consumers N]
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    StromBroker,
    cpu_seconds,
    create_topic,
    env_info,
    log,
    ratio,
    remove,
    workdir,
)
from confluent_kafka import Consumer, Producer, ShareConsumer  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

TIMEOUT_S = 300.0


def produce(bootstrap: str, topic: str, messages: int, size: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    pad = b"x" * max(size - 12, 0)
    for i in range(messages):
        while True:
            try:
                p.produce(topic, value=b"%012d" % i + pad)
                break
            except BufferError:
                p.poll(0.01)
    assert p.flush(60) == 0


def earliest(bootstrap: str, group: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entry = ConfigEntry("share.auto.offset.reset", "earliest",
                        incremental_operation=AlterConfigOpType.SET)  # fmt: skip
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[entry])
    for f in admin.incremental_alter_configs([resource]).values():
        f.result(30)


class Clock:
    """First and last record times across threads, and the distinct values seen."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.first: float | None = None
        self.last = 0.0
        self.seen: set[bytes] = set()
        self.deliveries = 0

    def got(self, values: list[bytes]) -> None:
        now = time.monotonic()
        with self.lock:
            if self.first is None:
                self.first = now
            self.last = now
            self.deliveries += len(values)
            self.seen.update(v[:12] for v in values)

    def rate(self, messages: int) -> float:
        assert self.first is not None and len(self.seen) == messages, (len(self.seen), messages)
        return messages / max(self.last - self.first, 1e-9)


def classic(bootstrap: str, topic: str, messages: int) -> Clock:
    clock = Clock()
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-classic",
                  "auto.offset.reset": "earliest"})  # fmt: skip
    c.subscribe([topic])
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while len(clock.seen) < messages and time.monotonic() < deadline:
            batch = [m.value() for m in c.consume(500, 1.0) if not m.error()]
            if batch:
                clock.got(batch)
    finally:
        c.close()
    return clock


def share(bootstrap: str, topic: str, messages: int, consumers: int, group: str) -> Clock:
    earliest(bootstrap, group)
    clock = Clock()
    done = threading.Event()

    def run() -> None:
        c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
        c.subscribe([topic])
        deadline = time.monotonic() + TIMEOUT_S
        try:
            while not done.is_set() and time.monotonic() < deadline:
                batch = [m.value() for m in c.poll(1.0) if not m.error()]
                if batch:
                    clock.got(batch)
                    if len(clock.seen) >= messages:
                        done.set()
            c.commit_sync(30)
        finally:
            c.close()

    threads = [threading.Thread(target=run) for _ in range(consumers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT_S + 60)
    return clock


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--consumers", type=int, default=3)
    args = ap.parse_args()
    wd = workdir()
    broker = StromBroker(wd)
    broker.start()
    results: dict[str, dict[str, float | None]] = {}
    try:
        topic = "bench-share"
        create_topic(broker.bootstrap, topic, args.partitions)
        log(f"producing {args.messages} records of {args.size} B")
        produce(broker.bootstrap, topic, args.messages, args.size)
        runs = (("classic", lambda: classic(broker.bootstrap, topic, args.messages)),
                ("share_1", lambda: share(broker.bootstrap, topic, args.messages, 1, "bench-s1")),
                (f"share_{args.consumers}",
                 lambda: share(broker.bootstrap, topic, args.messages, args.consumers, "bench-sn")))  # fmt: skip
        for name, run in runs:
            cpu0 = cpu_seconds(broker.pid)
            clock = run()
            cpu1 = cpu_seconds(broker.pid)
            rate = clock.rate(args.messages)
            cpu = (cpu1 - cpu0) / args.messages * 1e6 if cpu0 is not None and cpu1 is not None else None
            results[name] = {"msgs_per_s": round(rate), "deliveries": clock.deliveries,
                             "broker_cpu_s_per_M": round(cpu, 2) if cpu is not None else None}  # fmt: skip
            log(f"{name}: {rate:.0f} msgs/s ({clock.deliveries} deliveries)")
    finally:
        broker.stop()
        remove(wd)
    ref = results["classic"]["msgs_per_s"]
    print(json.dumps({
        "benchmark": "share_throughput", "messages": args.messages, "size": args.size,
        "partitions": args.partitions, "consumers": args.consumers, "results": results,
        "ratios": {k: ratio(v["msgs_per_s"], ref) for k, v in results.items() if k != "classic"},
        "cpu_ratios": {k: ratio(v["broker_cpu_s_per_M"], results["classic"]["broker_cpu_s_per_M"])
                       for k, v in results.items() if k != "classic"},
        "env": env_info(),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
