"""Transactional produce throughput against non-transactional produce, same broker, same run.

Starts one strom broker, produces ``--messages`` records of ``--size`` bytes with
confluent-kafka three ways: idempotent without transactions (the reference), then in
transactions of 100 and of 1,000 records (commit after each), and prints ONE JSON line with
msgs/s of each and their ratios to the reference (progress on stderr). Read only the ratios.

    python benchmarks/txn_throughput.py [--messages N] [--size BYTES] [--partitions N]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import StromBroker, create_topic, env_info, log, ratio, remove, workdir  # noqa: E402
from confluent_kafka import Producer  # noqa: E402


def run(bootstrap: str, topic: str, messages: int, size: int, txn_size: int | None) -> float:
    """msgs/s producing ``messages`` records, in transactions of ``txn_size`` (None: none)."""
    conf = {"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True}
    if txn_size is not None:
        conf["transactional.id"] = f"bench-{topic}"
    p = Producer(conf)
    value = b"x" * size
    if txn_size is not None:
        p.init_transactions(30)
        p.begin_transaction()
    p.produce(topic, value=value)  # warm-up, not timed: connections, metadata, producer id
    if txn_size is not None:
        p.commit_transaction(60)
    p.flush(60)
    start = time.monotonic()
    sent = 0
    while sent < messages:
        batch = min(txn_size or messages, messages - sent)
        if txn_size is not None:
            p.begin_transaction()
        for _ in range(batch):
            while True:
                try:
                    p.produce(topic, value=value)
                    break
                except BufferError:
                    p.poll(0.01)
        sent += batch
        if txn_size is not None:
            p.commit_transaction(60)
    p.flush(60)
    return messages / (time.monotonic() - start)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=3)
    args = ap.parse_args()
    wd = workdir()
    broker = StromBroker(wd)
    broker.start()
    results: dict[str, float] = {}
    try:
        for name, txn_size in (("plain", None), ("txn_100", 100), ("txn_1000", 1000)):
            topic = f"bench-{name}"
            create_topic(broker.bootstrap, topic, args.partitions)
            log(f"{name}: producing {args.messages} records")
            results[name] = run(broker.bootstrap, topic, args.messages, args.size, txn_size)
            log(f"{name}: {results[name]:.0f} msgs/s")
    finally:
        broker.stop()
        remove(wd)
    print(json.dumps({
        "benchmark": "txn_throughput", "messages": args.messages, "size": args.size,
        "msgs_per_s": {k: round(v) for k, v in results.items()},
        "ratios": {k: ratio(results[k], results["plain"]) for k in ("txn_100", "txn_1000")},
        "env": env_info(),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
