"""Shared plumbing of the example pipelines: topics, producing, reading results, the CLI.

Each example module defines ``generate(bootstrap, prefix)`` (produces its data, returns the
known answer), ``run(spark, bootstrap, prefix, workdir)`` (the Spark pipeline, to completion
with Trigger.AvailableNow) and ``result(spark, bootstrap, prefix, workdir)`` (what the pipeline
wrote, in the answer's shape). ``main`` runs the three against a broker and compares. Python data sources write in append
mode only, so windowed results are written when the watermark passes their window.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic


def create_topics(bootstrap: str, names: Iterable[str], partitions: int = 3) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(n, partitions, 1) for n in names])
    for future in futures.values():
        future.result(30)


def produce_json(bootstrap: str, topic: str, events: Iterable[tuple[str, dict[str, Any]]]) -> int:
    """Produce (key, event) pairs as JSON values, keyed (murmur2, like the Java client)."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "partitioner": "murmur2_random", "linger.ms": 20}
    )
    count = 0
    for key, event in events:
        producer.produce(topic, key=key.encode(), value=json.dumps(event).encode())
        count += 1
        if count % 10_000 == 0:
            producer.poll(0)
    if producer.flush(60):
        raise RuntimeError(f"not every event reached {topic}")
    return count


def read_json(spark: Any, bootstrap: str, topic: str) -> dict[str, Any]:
    """The JSON value per key of a topic (the latest, should a key appear twice)."""
    rows = (
        spark.read.format("strom")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .load()
        .selectExpr("CAST(key AS STRING) AS k", "CAST(value AS STRING) AS v", "partition", "offset")
        .collect()
    )
    latest: dict[str, Any] = {}
    for row in sorted(rows, key=lambda r: (r.partition, r.offset)):
        latest[row.k] = json.loads(row.v)
    return latest


def stream(spark: Any, bootstrap: str, topic: str) -> Any:
    return (
        spark.readStream.format("strom")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
    )


def example_name(example: ModuleType) -> str:
    """The example's own name (its file's), also when it runs as ``__main__``."""
    path = getattr(example, "__file__", None)
    return Path(path).stem if path else example.__name__.rsplit(".", 1)[-1]


def main(example: ModuleType) -> int:
    parser = argparse.ArgumentParser(description=(example.__doc__ or "").splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092", help="a strom broker")
    parser.add_argument("--master", default=None, help="Spark master (default local[*])")
    parser.add_argument("--prefix", default=None, help="topic name prefix (default: unique)")
    args = parser.parse_args()
    import strom.spark  # noqa: PLC0415

    name = example_name(example)
    prefix = args.prefix or f"{name.replace('_', '-')}-{int(time.time())}"
    spark = strom.spark.session(app_name=prefix, master=args.master)
    with tempfile.TemporaryDirectory() as workdir:
        answer = example.generate(args.bootstrap, prefix)
        example.run(spark, args.bootstrap, prefix, workdir)
        got = example.result(spark, args.bootstrap, prefix, workdir)
    spark.stop()
    ok = got == answer
    print(json.dumps({"example": name, "prefix": prefix, "ok": ok, "results": len(got),
                      "expected": len(answer)}))
    if not ok:
        missing = sorted(set(answer) - set(got))[:5]
        wrong = sorted(k for k in answer if k in got and got[k] != answer[k])[:5]
        print(f"missing {missing}, wrong {wrong}", file=sys.stderr)
    return 0 if ok else 1
