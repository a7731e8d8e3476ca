"""Spark's own ``format("kafka")`` against strom's ``format("strom")``: same topic, same run.

One strom broker (stopped by PID), one SparkSession (``local[2]`` by default) holding both
sources (Spark's Kafka connector from the jars Maven resolved, ``kafka_jvm.spark_kafka_jars``).
After an untimed warm-up (every phase once per format), each phase runs ``--rounds`` times,
the two formats back to back, which one first alternating:

- ``batch_read``: the whole topic through ``spark.read.format(F)`` into the ``noop`` sink;
- ``stream_read``: the same through ``readStream`` with ``Trigger.AvailableNow`` into ``noop``;
- ``batch_write``: ``--rows`` rows (a string key and a ``--size``-byte value) written by
  ``df.write.format(F)`` into a fresh topic (the end offsets are checked).

Figures: rows/s (rows / wall time of the job, the session warm), the median of the rounds with
each round's figure, ``strom_vs_kafka`` (the medians' ratio, > 1: strom's source is faster),
``strom_vs_kafka_per_round`` and its median. Prints ONE JSON line.

    python benchmarks/spark_kafka_format.py [--rows 300000] [--rounds 3] [--partitions 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import env_info, log, ratio, remove, workdir  # noqa: E402
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from kafka_jvm import spark_kafka_jars  # noqa: E402

from strom.testing import BrokerProcess  # noqa: E402

FORMATS = ("kafka", "strom")


def fill(bootstrap: str, topic: str, rows: int, partitions: int, size: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20})
    value = b"v" * size
    for i in range(rows):
        while True:
            try:
                producer.produce(topic, value=value, key=b"%d" % (i % 1000),
                                 partition=i % partitions)  # fmt: skip
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120):
        raise RuntimeError("fill: messages not delivered")


def end_offsets(bootstrap: str, topic: str, partitions: int) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-ends"})
    try:
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                   for p in range(partitions))  # fmt: skip
    finally:
        consumer.close()


def batch_read(spark: Any, fmt: str, bootstrap: str, topic: str, rows: int) -> float:
    t0 = time.perf_counter()
    (spark.read.format(fmt).option("kafka.bootstrap.servers", bootstrap)
     .option("subscribe", topic).load().write.format("noop").mode("overwrite").save())  # fmt: skip
    return rows / (time.perf_counter() - t0)


def stream_read(spark: Any, fmt: str, bootstrap: str, topic: str, rows: int,
                checkpoint: Path) -> float:  # fmt: skip
    t0 = time.perf_counter()
    query = (spark.readStream.format(fmt).option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", topic).option("startingOffsets", "earliest").load()
             .writeStream.format("noop").option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())  # fmt: skip
    query.awaitTermination(600)
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    seconds = time.perf_counter() - t0
    read = sum(p["numInputRows"] for p in query.recentProgress)
    if read != rows:
        raise RuntimeError(f"stream_read {fmt}: {read} rows, expected {rows}")
    return rows / seconds


def batch_write(spark: Any, fmt: str, bootstrap: str, topic: str, rows: int, size: int,
                partitions: int) -> float:  # fmt: skip
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    df = spark.range(rows).selectExpr("CAST(id % 1000 AS STRING) AS key",
                                      f"REPEAT('w', {size}) AS value").cache()  # fmt: skip
    df.count()  # materialized before the clock: only the sink is timed
    t0 = time.perf_counter()
    (df.write.format(fmt).mode("append").option("kafka.bootstrap.servers", bootstrap)
     .option("topic", topic).save())  # fmt: skip
    seconds = time.perf_counter() - t0
    df.unpersist()
    written = end_offsets(bootstrap, topic, partitions)
    if written != rows:
        raise RuntimeError(f"batch_write {fmt}: {written} records, expected {rows}")
    return rows / seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--size", type=int, default=100, help="value bytes")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()

    import strom.spark  # noqa: PLC0415

    tmp = workdir()
    broker = BrokerProcess(tmp / "data", log_file=tmp / "strom.log")
    figures: dict[str, dict[str, list[float]]] = {
        phase: {f: [] for f in FORMATS} for phase in ("batch_read", "stream_read", "batch_write")
    }
    try:
        broker.start()
        topic = "bench-spark"
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(topic, args.partitions, 1)])[topic].result(30)
        log(f"filling {topic} with {args.rows} rows")
        fill(broker.bootstrap, topic, args.rows, args.partitions, args.size)
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        spark = strom.spark.session(
            app_name="spark-kafka-format", master=args.master, log_level="ERROR",
            config={"spark.jars": ",".join(spark_kafka_jars()),
                    "spark.sql.shuffle.partitions": str(args.partitions),
                    "spark.python.worker.reuse": "true"},
        )  # fmt: skip
        try:
            # warm-up, not counted: every phase once per format (the JVM compiles each code
            # path only after it ran; one run measured Spark's Kafka source at 32k rows/s
            # in its first streaming read and 250k in the next)
            for fmt in FORMATS:
                batch_read(spark, fmt, broker.bootstrap, topic, args.rows)
                with tempfile.TemporaryDirectory(dir=tmp) as cp:
                    stream_read(spark, fmt, broker.bootstrap, topic, args.rows, Path(cp))
                batch_write(spark, fmt, broker.bootstrap, f"bench-warm-{fmt}", args.rows,
                            args.size, args.partitions)  # fmt: skip
            for rnd in range(args.rounds):
                order = FORMATS if rnd % 2 == 0 else FORMATS[::-1]
                for fmt in order:
                    figures["batch_read"][fmt].append(
                        batch_read(spark, fmt, broker.bootstrap, topic, args.rows))
                    with tempfile.TemporaryDirectory(dir=tmp) as cp:
                        figures["stream_read"][fmt].append(stream_read(
                            spark, fmt, broker.bootstrap, topic, args.rows, Path(cp)))
                    figures["batch_write"][fmt].append(batch_write(
                        spark, fmt, broker.bootstrap, f"bench-write-{fmt}-{rnd}", args.rows,
                        args.size, args.partitions))  # fmt: skip
                    log(f"round {rnd + 1} {fmt}: " + ", ".join(
                        f"{phase} {f[fmt][-1]:.0f} rows/s" for phase, f in figures.items()))
        finally:
            spark.stop()
    finally:
        broker.stop()
        remove(tmp)
    out: dict[str, Any] = {"benchmark": "spark_kafka_format", "rows": args.rows,
                           "size": args.size, "partitions": args.partitions,
                           "master": args.master, "rounds": args.rounds}  # fmt: skip
    for phase, per_format in figures.items():
        medians = {f: round(statistics.median(v)) for f, v in per_format.items() if v}
        # each round's strom / kafka (the two ran back to back: the load they shared)
        per_round = [round(s / k, 3) for s, k in zip(per_format["strom"], per_format["kafka"],
                                                     strict=False) if k]  # fmt: skip
        out[phase] = {"rows_per_s": medians,
                      "rounds": {f: [round(x) for x in v] for f, v in per_format.items()},
                      "strom_vs_kafka": ratio(medians.get("strom"), medians.get("kafka")),
                      "strom_vs_kafka_per_round": per_round,
                      "strom_vs_kafka_round_median":
                          round(statistics.median(per_round), 3) if per_round else None}  # fmt: skip
    env = env_info()
    import pyspark  # noqa: PLC0415

    env["pyspark"] = pyspark.__version__
    env["spark_kafka_jars"] = [Path(j).name for j in spark_kafka_jars()]
    out["env"] = env
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
