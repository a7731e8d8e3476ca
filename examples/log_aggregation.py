"""Log aggregation: counts per service and level per window; error lines to their own topic.

Plain-text log lines (``<iso time> <service> <LEVEL> <message>``, keyed by service) go to
``<prefix>-logs``. One query counts lines per service, level and 1-minute window into
``<prefix>-log-counts`` (``{"service", "level", "window_start", "lines"}`` keyed
``service|level|window_start``, append mode;
a last far-future line closes the final windows); a second query routes the ERROR lines unchanged,
keyed by service, to ``<prefix>-errors``.

    python examples/log_aggregation.py --bootstrap 127.0.0.1:9092
"""

from __future__ import annotations

import random
import sys
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

sys.path.insert(0, str(Path(__file__).parent))
import _pipeline  # noqa: E402

BASE_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
SERVICES = ["api", "auth", "billing", "search", "mailer", "cart"]
LEVELS = ["DEBUG", "INFO", "WARN", "ERROR"]
LEVEL_WEIGHTS = [20, 60, 15, 5]
LINES = 4000


def generate(bootstrap: str, prefix: str) -> dict[str, Any]:
    _pipeline.create_topics(bootstrap, [f"{prefix}-logs", f"{prefix}-log-counts", f"{prefix}-errors"])
    rng = random.Random(3)
    counts: Counter[str] = Counter()
    errors: list[str] = []
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    for i in range(LINES):
        service = rng.choice(SERVICES)
        level = rng.choices(LEVELS, LEVEL_WEIGHTS)[0]
        ts = BASE_MS + i * 75 + rng.randrange(75)  # five minutes of logs
        stamp = datetime.fromtimestamp(ts / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        line = f"{stamp} {service} {level} request {i} done in {rng.randrange(900)}ms"
        producer.produce(f"{prefix}-logs", key=service.encode(), value=line.encode())
        counts[f"{service}|{level}|{(ts // 60_000) * 60_000}"] += 1
        if level == "ERROR":
            errors.append(line)
        producer.poll(0)
    # One line an hour later moves the watermark past every window above (it closes them).
    producer.produce(f"{prefix}-logs", key=b"api", value=b"2026-01-01T01:00:00.000000Z api INFO flush")
    if producer.flush(60):
        raise RuntimeError("not every log line was acknowledged")
    answer: dict[str, Any] = {
        key: {
            "service": key.split("|")[0],
            "level": key.split("|")[1],
            "window_start": int(key.split("|")[2]),
            "lines": n,
        }
        for key, n in counts.items()
    }
    answer["errors"] = sorted(errors)
    return answer


def run(spark: Any, bootstrap: str, prefix: str, workdir: str) -> None:
    from pyspark.sql import functions as F  # noqa: PLC0415

    parts = F.split(F.col("line"), " ", 4)
    lines = (
        _pipeline.stream(spark, bootstrap, f"{prefix}-logs")
        .select(F.col("value").cast("string").alias("line"))
        .select(
            "line",
            F.to_timestamp(parts[0], "yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'").alias("event_time"),
            parts[1].alias("service"),
            parts[2].alias("level"),
        )
    )
    counts = (
        lines.withWatermark("event_time", "1 minute")
        .groupBy("service", "level", F.window("event_time", "1 minute"))
        .agg(F.count("*").alias("lines"))
    )
    start_ms = F.unix_millis(F.col("window.start"))
    counting = (
        counts.select(
            F.concat_ws("|", "service", "level", start_ms.cast("string")).alias("key"),
            F.to_json(F.struct("service", "level", start_ms.alias("window_start"), "lines")).alias(
                "value"
            ),
        )
        .writeStream.format("strom")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", f"{prefix}-log-counts")
        .option("checkpointLocation", f"{workdir}/counts-ck")
        .trigger(availableNow=True)
        .start()
    )
    routing = (
        lines.where(F.col("level") == "ERROR")
        .select(F.col("service").alias("key"), F.col("line").alias("value"))
        .writeStream.format("strom")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", f"{prefix}-errors")
        .option("checkpointLocation", f"{workdir}/errors-ck")
        .trigger(availableNow=True)
        .start()
    )
    counting.awaitTermination()
    routing.awaitTermination()


def result(spark: Any, bootstrap: str, prefix: str, workdir: str) -> dict[str, Any]:
    got: dict[str, Any] = _pipeline.read_json(spark, bootstrap, f"{prefix}-log-counts")
    errors = (
        spark.read.format("strom")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", f"{prefix}-errors")
        .load()
        .selectExpr("CAST(key AS STRING) AS service", "CAST(value AS STRING) AS line")
        .collect()
    )
    assert all(f" {r.service} ERROR " in r.line for r in errors), "an error line under a wrong key"
    got["errors"] = sorted(r.line for r in errors)
    return got


if __name__ == "__main__":
    sys.exit(_pipeline.main(sys.modules[__name__]))
