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
- ``topic_to_python_discard``: the strom source into a Python sink that drops its rows
  (``spark_memory.py``): what any Python data source sink costs in Spark before writing;
- ``topic_to_topic_eo``: the same query with ``exactlyOnce=true`` (one transaction per task and
  batch, the batch id recorded by a transactional offset commit); quoted as a ratio to
  ``topic_to_topic`` measured in the same run;
- batch reads into ``noop``, ``--repeat`` times each, alternated: ``batch_arrow`` (the strom
  source), ``batch_memory`` (``spark_memory.py``: an in-memory Python data source yielding the
  same rows as Arrow batches of the size a strom Fetch gives, no I/O: the ceiling of Spark's
  Python data source path) and ``batch_tuples`` (a reader yielding one tuple per record);
- ``client_ceiling``: confluent-kafka's own consume rate on the same topic (a Consumer in a
  plain Python loop, ``consume(10000)``, every message's value touched): what any source built
  on the client's messages could at most reach.

Rates are rows / summed ``triggerExecution`` time of the query's progress reports (batch reads:
rows / wall time of the job; medians over the repeats, with min and max). Quote ratios, e.g.
``batch_arrow / batch_memory`` (issue 20's target: >= 0.5) and ``topic_to_topic /
source_arrow`` (>= 0.6), never the absolute figures.

    python benchmarks/spark_source.py --rows 300000 --repeat 3
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
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


def client_ceiling(bootstrap: str, topic: str, rows: int, partitions: int) -> float:
    """Rows/s of a confluent-kafka Consumer reading the whole topic in a Python loop."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-ceiling",
                         "enable.auto.commit": False})  # fmt: skip
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = 0
    nbytes = 0
    start = time.perf_counter()
    deadline = time.monotonic() + 300
    while got < rows and time.monotonic() < deadline:
        for m in consumer.consume(10_000, 1.0):
            if m.error() is None:
                got += 1
                nbytes += len(m.value())
    elapsed = time.perf_counter() - start
    consumer.close()
    assert got == rows, (got, rows)
    return got / elapsed


def summary(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values)), "min": round(min(values)),
            "max": round(max(values))}  # fmt: skip


def streaming_rate(query: Any) -> tuple[int, float]:
    rows = sum(p["numInputRows"] for p in query.recentProgress)
    ms = sum(p["durationMs"].get("triggerExecution", 0) for p in query.recentProgress)
    return rows, rows / (ms / 1000.0) if ms else 0.0


def duration_parts(query: Any) -> dict[str, int]:
    """The query's progress ``durationMs`` summed over its micro-batches (``addBatch``: the
    batch's job, writer planning and commit included; ``latestOffset``, ``queryPlanning``,
    ``walCommit``, ``commitOffsets``: the driver's work around it), and the batch count."""
    parts: dict[str, int] = {"batches": 0}
    for progress in query.recentProgress:
        if not progress["numInputRows"]:
            continue
        parts["batches"] += 1
        for key, ms in progress["durationMs"].items():
            parts[key] = parts.get(key, 0) + int(ms)
    return parts


def streaming(spark: Any, args: argparse.Namespace, bs: str, batch: int, work: Path,
              result: dict[str, Any]) -> None:  # fmt: skip
    """The streaming phases, ``--repeat`` times each in rotating order after a warm-up query:
    rate -> noop, strom -> noop, strom -> strom (at-least-once and exactly-once)."""
    runs = itertools.count()

    def rate_query() -> float:
        q = (
            spark.readStream.format("rate-micro-batch").option("rowsPerBatch", batch)
            .option("numPartitions", args.partitions).load()
            .selectExpr("CAST(CAST(value AS STRING) AS BINARY) AS value", "timestamp")
            .writeStream.format("noop")
            .option("checkpointLocation", str(work / f"ck-{next(runs)}")).start()
        )  # fmt: skip
        while sum(p["numInputRows"] for p in q.recentProgress) < args.rows:
            time.sleep(0.5)
        q.stop()
        return streaming_rate(q)[1]

    def strom_stream(sink: str, rows: int = args.rows, **opts: str) -> float:
        w = (
            spark.readStream.format("strom").option("kafka.bootstrap.servers", bs)
            .option("subscribe", "bench-in").option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", str(batch)).load()
            .select("key", "value").writeStream.format(sink)
            .option("checkpointLocation", str(work / f"ck-{next(runs)}"))
        )  # fmt: skip
        for k, v in opts.items():
            w = w.option(k, v)
        query = w.trigger(availableNow=True).start()
        query.awaitTermination()
        got, rate = streaming_rate(query)
        assert got == rows, (got, rows)
        parts[sink + ("_eo" if opts.get("exactlyOnce") else "")].append(duration_parts(query))
        return rate

    parts: dict[str, list[dict[str, int]]] = {"noop": [], "strom": [], "strom_eo": [],
                                              "strom_discard": []}  # fmt: skip

    sink = {"topic": "bench-out", "kafka.bootstrap.servers": bs}
    phases = {
        "rate": rate_query,
        "source_arrow": lambda: strom_stream("noop"),
        "topic_to_topic": lambda: strom_stream("strom", **sink),
        "topic_to_topic_eo": lambda: strom_stream("strom", exactlyOnce="true", **sink),
        "topic_to_python_discard": lambda: strom_stream("strom_discard"),
    }
    if args.phases:
        phases = {name: phases[name] for name in args.phases.split(",")}
    log("warm-up: strom -> strom")
    strom_stream("strom", **sink)
    parts["strom"].clear()
    rates: dict[str, list[float]] = {name: [] for name in phases}
    for r in range(args.repeat):
        names = list(phases)
        for name in names[r % len(names) :] + names[: r % len(names)]:
            log(f"streaming {name} ({r + 1}/{args.repeat})")
            rates[name].append(phases[name]())
    for name, values in rates.items():
        result[name] = summary(values)
    result["duration_ms_by_sink"] = {sink: runs_ for sink, runs_ in parts.items() if runs_}
    if "topic_to_topic" not in rates or "source_arrow" not in rates:
        return
    result["per_repeat_topic_to_topic/source_arrow"] = [
        round(a / b, 3) for a, b in zip(rates["topic_to_topic"], rates["source_arrow"], strict=True)
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--size", type=int, default=100, help="value bytes")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--repeat", type=int, default=3, help="batch reads per source")
    parser.add_argument("--skip-streaming", action="store_true")
    parser.add_argument("--streaming-only", action="store_true",
                        help="no batch reads, no client ceiling")  # fmt: skip
    parser.add_argument("--phases", default="",
                        help="streaming phases to run, comma-separated (default: all)")  # fmt: skip
    args = parser.parse_args()
    import pyspark  # noqa: PLC0415

    # The tuple reader lives in spark_tuples.py beside this file: executors import it by name.
    here = str(Path(__file__).resolve().parent)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (here, os.environ.get("PYTHONPATH", "")) if p
    )
    sys.path.insert(0, here)
    import spark_memory  # noqa: PLC0415
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
        spark.dataSource.register(spark_memory.MemorySource)
        spark.dataSource.register(spark_memory.DiscardSink)
        batch = max(args.rows // 5, 1)

        if not args.skip_streaming:
            streaming(spark, args, bs, batch, work, result)
        if args.streaming_only:
            spark.stop()
            result["env"] = {"cpus": os.cpu_count(), "load": os.getloadavg()[0],
                             "pyspark": pyspark.__version__, "master": args.master}  # fmt: skip
            print(json.dumps(result))
            return
        from strom.spark.fetcher import DEFAULT_PARTITION_FETCH_BYTES  # noqa: PLC0415

        # the memory source's batches: as many rows as one strom Fetch gives (~13 bytes of
        # record framing and key beside each value)
        per_batch = max(DEFAULT_PARTITION_FETCH_BYTES // (args.size + 13), 1)
        runs: dict[str, list[float]] = {"batch_arrow": [], "batch_memory": [], "batch_tuples": []}
        for r in range(args.repeat):
            order = list(runs)
            order = order[r % 3 :] + order[: r % 3]
            for key in order:
                log(f"batch read {key} ({r + 1}/{args.repeat}) -> noop")
                reader = spark.read
                if key == "batch_memory":
                    reader = reader.format("strom_memory").option("rows", str(args.rows)).option(
                        "partitions", str(args.partitions)).option(
                        "rowsPerBatch", str(per_batch)).option("valueBytes", str(args.size))
                else:
                    fmt = "strom" if key == "batch_arrow" else "strom_tuples"
                    reader = reader.format(fmt).option("kafka.bootstrap.servers", bs).option(
                        "subscribe", "bench-in")
                start = time.perf_counter()
                reader.load().write.format("noop").mode("overwrite").save()
                runs[key].append(args.rows / (time.perf_counter() - start))
        for key, values in runs.items():
            result[key] = summary(values)
        result["memory_rows_per_batch"] = per_batch
        ceilings = [client_ceiling(bs, "bench-in", args.rows, args.partitions)
                    for _ in range(args.repeat)]  # fmt: skip
        result["client_ceiling"] = summary(ceilings)
        spark.stop()
        med = {k: result[k]["median"] for k in ("batch_arrow", "batch_memory", "batch_tuples",
                                                "client_ceiling")}  # fmt: skip
        ratios = {
            "batch_arrow/batch_memory": round(med["batch_arrow"] / med["batch_memory"], 3),
            "batch_arrow/batch_tuples": round(med["batch_arrow"] / med["batch_tuples"], 3),
            "batch_arrow/client_ceiling": round(med["batch_arrow"] / med["client_ceiling"], 3),
            "batch_memory/client_ceiling": round(med["batch_memory"] / med["client_ceiling"], 3),
            "per_repeat_arrow/memory": [round(a / m, 3) for a, m in zip(
                runs["batch_arrow"], runs["batch_memory"], strict=True)],
        }  # fmt: skip
        if not args.skip_streaming:
            m = {k: result[k]["median"] for k in ("rate", "source_arrow", "topic_to_topic",
                                                  "topic_to_topic_eo",
                                                  "topic_to_python_discard")}  # fmt: skip
            ratios.update({
                "source_arrow/rate": round(m["source_arrow"] / m["rate"], 3),
                "topic_to_topic/source_arrow": round(m["topic_to_topic"] / m["source_arrow"], 3),
                "topic_to_topic/rate": round(m["topic_to_topic"] / m["rate"], 3),
                "topic_to_python_discard/source_arrow": round(
                    m["topic_to_python_discard"] / m["source_arrow"], 3),
                "topic_to_topic/topic_to_python_discard": round(
                    m["topic_to_topic"] / m["topic_to_python_discard"], 3),
                "topic_to_topic_eo/topic_to_topic": round(
                    m["topic_to_topic_eo"] / m["topic_to_topic"], 3),
            })  # fmt: skip
        result["ratios"] = ratios
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
