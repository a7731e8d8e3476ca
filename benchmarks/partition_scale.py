"""Partition count at scale (issue 6 item 1): one strom broker with N partitions.

Measures, in one run: creating an N-partition topic (and the worst latency another client's
Metadata request sees meanwhile), producing one message to every partition, broker RSS per
1,000 partitions, start-up after a clean shutdown and after kill -9 (every log then holds
unflushed data to recover), and reading everything back. The reference measured in the same
run is the same broker's start-up with only the 50 ``__consumer_offsets`` partitions, so the
start-up figures are also given as ratios to it. Prints one JSON line.

    python benchmarks/partition_scale.py                 # 10,000 partitions, ~2-4 min
    python benchmarks/partition_scale.py --partitions 2000
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import env_info, log, ratio, remove, workdir  # noqa: E402
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from strom.testing import BrokerProcess  # noqa: E402


def rss_mb(pid: int | None) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def timed_start(broker: BrokerProcess) -> float:
    started = time.monotonic()
    broker.start(timeout=600)
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--partitions", type=int, default=10_000)
    n = parser.parse_args().partitions
    work = workdir()
    broker = BrokerProcess(work / "data", log_file=work / "strom.log")
    out: dict[str, object] = {"benchmark": "partition_scale", "partitions": n, "env": env_info()}
    try:
        broker.start()
        broker.stop()
        reference_start = timed_start(broker)  # 50 __consumer_offsets partitions only
        rss_before = rss_mb(broker.pid)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("other", 1, 1)])["other"].result(60)
        bystander = AdminClient({"bootstrap.servers": broker.bootstrap})
        bystander.list_topics("other", timeout=30)
        latencies: list[float] = []
        done = threading.Event()

        def ask() -> None:
            while not done.is_set():
                t = time.perf_counter()
                bystander.list_topics("other", timeout=60)
                latencies.append(time.perf_counter() - t)
                time.sleep(0.02)

        thread = threading.Thread(target=ask)
        thread.start()
        log(f"creating {n} partitions")
        t = time.monotonic()
        futures = admin.create_topics([NewTopic("big", n, 1)], operation_timeout=600,
                                      request_timeout=600)  # fmt: skip
        futures["big"].result(660)
        out["create_s"] = round(time.monotonic() - t, 2)
        done.set()
        thread.join()
        out["bystander_max_ms"] = round(max(latencies) * 1000, 1)
        out["bystander_requests"] = len(latencies)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20,
                             "queue.buffering.max.messages": 2 * n})  # fmt: skip
        t = time.monotonic()
        for p in range(n):
            producer.produce("big", value=b"a-%d" % p, partition=p)
            producer.poll(0)
        assert producer.flush(300) == 0
        out["produce_one_each_s"] = round(time.monotonic() - t, 2)
        out["rss_mb_per_1000_partitions"] = round((rss_mb(broker.pid) - rss_before) * 1000 / n, 2)
        t = time.monotonic()
        broker.stop(timeout=300)
        out["clean_shutdown_s"] = round(time.monotonic() - t, 2)
        clean = timed_start(broker)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20,
                             "queue.buffering.max.messages": 2 * n})  # fmt: skip
        for p in range(n):  # unflushed data in every log for the kill -9 restart to recover
            producer.produce("big", value=b"b-%d" % p, partition=p)
            producer.poll(0)
        assert producer.flush(300) == 0
        broker.kill()
        killed = timed_start(broker)
        out["startup_reference_s"] = round(reference_start, 2)
        out["startup_clean_s"] = round(clean, 2)
        out["startup_after_kill_s"] = round(killed, 2)
        out["ratios"] = {
            "startup_clean_vs_reference": ratio(clean, reference_start),
            "startup_after_kill_vs_reference": ratio(killed, reference_start),
        }
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "bench",
                             "enable.auto.commit": False})  # fmt: skip
        consumer.assign([TopicPartition("big", p, 0) for p in range(n)])
        got = 0
        deadline = time.monotonic() + 300
        while got < 2 * n and time.monotonic() < deadline:
            got += sum(1 for m in consumer.consume(5000, 1) if not m.error())
        consumer.close()
        out["read_back"] = got
    finally:
        broker.stop()
        remove(work)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
