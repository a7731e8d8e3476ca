"""Vehicle tracking: per-vehicle distance and average speed per 1-minute event-time window.

GPS events, keyed by vehicle id (so one vehicle's events stay in one partition, in order), go
to ``<prefix>-gps``; the pipeline aggregates them per vehicle and 1-minute window of event time,
with a 2-minute watermark, and writes ``{"vehicle", "window_start", "distance_m",
"avg_speed_kmh"}`` keyed ``vehicle|window_start`` to ``<prefix>-vehicle-stats`` (append mode:
a window is written once, when the watermark passes it; the generator ends with one
far-future event that closes the last windows).

    python examples/vehicle_tracking.py --bootstrap 127.0.0.1:9092
"""

from __future__ import annotations

import random
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import _pipeline  # noqa: E402

BASE_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
VEHICLES = 6
EVENTS_PER_VEHICLE = 60  # one every 10 s: 10 minutes


def generate(bootstrap: str, prefix: str) -> dict[str, Any]:
    """Produce the GPS events; return the known answer."""
    _pipeline.create_topics(bootstrap, [f"{prefix}-gps", f"{prefix}-vehicle-stats"])
    rng = random.Random(42)
    events = []
    windows: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for v in range(VEHICLES):
        vehicle = f"truck-{v}"
        for i in range(EVENTS_PER_VEHICLE):
            ts = BASE_MS + i * 10_000 + rng.randrange(0, 2000)
            speed = rng.randrange(20, 110)  # km/h
            meters = speed * 10_000 // 3600  # travelled in the last 10 s
            events.append((vehicle, {"vehicle": vehicle, "ts": ts, "speed_kmh": speed, "m": meters}))
            start = (ts // 60_000) * 60_000
            windows[f"{vehicle}|{start}"].append((meters, speed))
    # One event an hour later moves the watermark past every window above (it closes them).
    events.append(("truck-0", {"vehicle": "truck-0", "ts": BASE_MS + 3_600_000, "speed_kmh": 0, "m": 0}))
    _pipeline.produce_json(bootstrap, f"{prefix}-gps", events)
    return {
        key: {
            "vehicle": key.split("|")[0],
            "window_start": int(key.split("|")[1]),
            "distance_m": sum(m for m, _ in rows),
            "avg_speed_kmh": round(sum(s for _, s in rows) / len(rows), 3),
        }
        for key, rows in windows.items()
    }


def run(spark: Any, bootstrap: str, prefix: str, workdir: str) -> None:
    from pyspark.sql import functions as F  # noqa: PLC0415

    schema = "vehicle string, ts long, speed_kmh int, m int"
    events = (
        _pipeline.stream(spark, bootstrap, f"{prefix}-gps")
        .select(F.from_json(F.col("value").cast("string"), schema).alias("e"))
        .select("e.*")
        .withColumn("event_time", F.timestamp_millis("ts"))
        .withWatermark("event_time", "2 minutes")
    )
    stats = events.groupBy("vehicle", F.window("event_time", "1 minute")).agg(
        F.sum("m").alias("distance_m"), F.round(F.avg("speed_kmh"), 3).alias("avg_speed_kmh")
    )
    start_ms = F.unix_millis(F.col("window.start"))
    out = stats.select(
        F.concat_ws("|", "vehicle", start_ms.cast("string")).alias("key"),
        F.to_json(
            F.struct(
                "vehicle",
                start_ms.alias("window_start"),
                F.col("distance_m").cast("long").alias("distance_m"),
                "avg_speed_kmh",
            )
        ).alias("value"),
    )
    query = (
        out.writeStream.format("strom")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", f"{prefix}-vehicle-stats")
        .option("checkpointLocation", f"{workdir}/vehicle-ck")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()


def result(spark: Any, bootstrap: str, prefix: str, workdir: str) -> dict[str, Any]:
    return _pipeline.read_json(spark, bootstrap, f"{prefix}-vehicle-stats")


if __name__ == "__main__":
    sys.exit(_pipeline.main(sys.modules[__name__]))
