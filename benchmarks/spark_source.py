"""Rows/s through the strom data source, with Spark's own generators as the reference.

Prints one JSON line. Phases, all in one SparkSession (local[2] by default) against one strom
broker started here (stopped by PID):

- ``rate``: Spark's built-in ``rate-micro-batch`` source into the ``noop`` sink (the reference:
  what the engine does with no data source work at all);
- ``source_arrow``: a strom topic through ``format("strom")`` into ``noop`` (streaming,
  Trigger.AvailableNow);
- ``source_tuples``: the same read with a reader that yields one tuple per record (what the
  Arrow path is measured against);
- ``topic_to_topic``: strom topic -> ``format("strom")`` sink (at-least-once) -> strom topic;
- ``topic_to_topic_eo``: the same query with ``exactlyOnce=true`` (one transaction per task and
  batch, the batch id recorded by a transactional offset commit); quoted as a ratio to
  ``topic_to_topic`` measured in the same run.

Rates are rows / summed ``triggerExecution`` time of the query's progress reports (batch read
for the tuples/arrow pair: rows / wall time of the job). Quote ratios, e.g. ``source_arrow /
rate`` and ``source_arrow / source_tuples``, never the absolute figures.

    python benchmarks/spark_source.py --rows 300000
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from strom.testing import BrokerProcess


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def fill(bootstrap: str, topic: str, rows: int, partitions: int, size: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1 << 20})
    payload = b"x" * size
    for i in range(rows):
        while True:
            try:
                producer.produce(topic, value=payload, key=b"%d" % (i % 1000))
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0


def streaming_rate(query: Any) -> tuple[int, float]:
    rows = sum(p["numInputRows"] for p in query.recentProgress)
    ms = sum(p["durationMs"].get("triggerExecution", 0) for p in query.recentProgress)
    return rows, rows / (ms / 1000.0) if ms else 0.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--size", type=int, default=100, help="value bytes")
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    import pyspark  # noqa: PLC0415

    # The tuple reader lives in spark_tuples.py beside this file: executors import it by name.
    here = str(Path(__file__).resolve().parent)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (here, os.environ.get("PYTHONPATH", "")) if p
    )
    sys.path.insert(0, here)
    import spark_tuples  # noqa: PLC0415

    import strom.spark  # noqa: PLC0415

    work = Path(tempfile.mkdtemp(prefix="strom-spark-bench-"))
    broker = BrokerProcess(work / "data")
    broker.start()
    result: dict[str, Any] = {"rows": args.rows, "size": args.size, "partitions": args.partitions}
    try:
        bs = broker.bootstrap
        log("filling the source topic")
        fill(bs, "bench-in", args.rows, args.partitions, args.size)
        admin = AdminClient({"bootstrap.servers": bs})  # kept alive until the answer arrives
        admin.create_topics([NewTopic("bench-out", args.partitions, 1)])["bench-out"].result(30)
        spark = strom.spark.session(master=args.master, log_level="ERROR")
        spark.dataSource.register(spark_tuples.TupleSource)
        batch = max(args.rows // 5, 1)

        log("rate-micro-batch -> noop")
        q = (
            spark.readStream.format("rate-micro-batch").option("rowsPerBatch", batch)
            .option("numPartitions", args.partitions).load()
            .selectExpr("CAST(CAST(value AS STRING) AS BINARY) AS value", "timestamp")
            .writeStream.format("noop").option("checkpointLocation", str(work / "ck-rate"))
            .start()
        )  # fmt: skip
        while sum(p["numInputRows"] for p in q.recentProgress) < args.rows:
            time.sleep(0.5)
        q.stop()
        result["rate"] = round(streaming_rate(q)[1])

        def strom_stream(sink: str, **opts: str) -> float:
            w = (
                spark.readStream.format("strom").option("kafka.bootstrap.servers", bs)
                .option("subscribe", "bench-in").option("startingOffsets", "earliest")
                .option("maxOffsetsPerTrigger", str(batch)).load()
                .select("key", "value").writeStream.format(sink)
            )  # fmt: skip
            for k, v in opts.items():
                w = w.option(k, v)
            query = w.trigger(availableNow=True).start()
            query.awaitTermination()
            rows, rate = streaming_rate(query)
            assert rows == args.rows, (rows, args.rows)
            return rate

        log("strom -> noop")
        result["source_arrow"] = round(strom_stream("noop", checkpointLocation=str(work / "ck1")))
        log("strom -> strom (at-least-once)")
        result["topic_to_topic"] = round(
            strom_stream("strom", checkpointLocation=str(work / "ck2"), topic="bench-out",
                         **{"kafka.bootstrap.servers": bs})  # fmt: skip
        )
        log("strom -> strom (exactly-once)")
        result["topic_to_topic_eo"] = round(
            strom_stream("strom", checkpointLocation=str(work / "ck3"), topic="bench-out-eo",
                         exactlyOnce="true", **{"kafka.bootstrap.servers": bs})  # fmt: skip
        )
        for fmt, key in (("strom_tuples", "batch_tuples"), ("strom", "batch_arrow")):
            log(f"batch read {fmt} -> noop")
            start = time.perf_counter()
            spark.read.format(fmt).option("kafka.bootstrap.servers", bs).option(
                "subscribe", "bench-in"
            ).load().write.format("noop").mode("overwrite").save()
            result[key] = round(args.rows / (time.perf_counter() - start))
        spark.stop()
        result["ratios"] = {
            "source_arrow/rate": round(result["source_arrow"] / result["rate"], 3),
            "topic_to_topic/rate": round(result["topic_to_topic"] / result["rate"], 3),
            "topic_to_topic_eo/topic_to_topic": round(
                result["topic_to_topic_eo"] / result["topic_to_topic"], 3
            ),
            "arrow/tuples": round(result["batch_arrow"] / result["batch_tuples"], 3),
        }
        result["env"] = {
            "cpus": os.cpu_count(),
            "load": os.getloadavg()[0],
            "pyspark": pyspark.__version__,
            "master": args.master,
        }
    finally:
        broker.stop()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
