"""Transactional produce throughput against non-transactional produce, same broker, same run.

Starts each broker (strom; Apache Kafka from Maven's jars unless ``--only strom``; Tansu has
no transactions), produces ``--messages`` records of ``--size`` bytes with confluent-kafka
three ways: idempotent without transactions (the reference), then in transactions of 100 and
of 1,000 records (commit after each), and prints ONE JSON line with msgs/s of each, its
transactions per second, the ratios to the same broker's reference, and strom / Kafka
(progress on stderr). Read only the ratios.

    python benchmarks/txn_throughput.py [--messages N] [--size BYTES] [--partitions N]
                                        [--only strom|kafka]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    Broker,
    cpu_seconds,
    create_topic,
    env_info,
    log,
    make_brokers,
    ratio,
    remove,
    warm_up,
    workdir,
)
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


RUNS = (("plain", None), ("txn_100", 100), ("txn_1000", 1000))


def run_broker(broker: Broker, args: argparse.Namespace) -> dict[str, object]:
    broker.start()
    warmed = warm_up(broker, args.warmup, transactions=True)
    results: dict[str, float] = {}
    cpu: dict[str, float | None] = {}
    for name, txn_size in RUNS:
        topic = f"bench-{name}"
        create_topic(broker.bootstrap, topic, args.partitions)
        log(f"{broker.name} {name}: producing {args.messages} records")
        cpu0 = cpu_seconds(broker.pid)
        results[name] = run(broker.bootstrap, topic, args.messages, args.size, txn_size)
        cpu1 = cpu_seconds(broker.pid)
        cpu[name] = None if cpu0 is None or cpu1 is None else round(cpu1 - cpu0, 2)
        log(f"{broker.name} {name}: {results[name]:.0f} msgs/s")
    return {
        "msgs_per_s": {k: round(v) for k, v in results.items()},
        "transactions_per_s": {k: round(results[k] / size, 1) for k, size in RUNS if size},
        "broker_cpu_s": cpu,
        "warm_up": warmed,
        "ratios": {k: ratio(results[k], results["plain"]) for k in ("txn_100", "txn_1000")},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--only", choices=("strom", "kafka"))
    ap.add_argument("--warmup", type=float, default=10.0,
                    help="seconds of untimed work on each broker before measuring")
    args = ap.parse_args()
    wd = workdir()
    brokers, skipped = make_brokers(args.only, wd, names=("strom", "kafka"))
    out: dict[str, object] = {"benchmark": "txn_throughput", "messages": args.messages,
                              "size": args.size, "strom": None, "kafka": None}  # fmt: skip
    try:
        for broker in brokers:
            try:
                out[broker.name] = run_broker(broker, args)
            except Exception as exc:  # noqa: BLE001 - report, never fake a figure
                out[broker.name] = {"error": f"{type(exc).__name__}: {exc}",
                                    "log_tail": broker.log_tail()}  # fmt: skip
            finally:
                broker.stop()
    finally:
        remove(wd)

    def fig(name: str, key: str, run: str) -> float | None:
        node = out.get(name)
        value = node.get(key, {}).get(run) if isinstance(node, dict) else None
        return value if isinstance(value, (int, float)) else None

    out["ratios_vs_kafka"] = {run: ratio(fig("strom", "msgs_per_s", run),
                                         fig("kafka", "msgs_per_s", run))
                              for run, _ in RUNS}  # fmt: skip
    env = env_info()
    env["skipped"] = skipped
    out["env"] = env
    print(json.dumps(out))


if __name__ == "__main__":
    main()
