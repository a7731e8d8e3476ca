"""Website activity: views per page per minute, and the top pages.

Page-view events (keyed by user) go to ``<prefix>-views``. A streaming query counts views per
page and minute into ``<prefix>-page-views`` (``{"page", "minute", "views"}`` keyed
``page|minute``, append mode:
written when the watermark passes the minute; a last far-future event closes the final ones); a batch job then reads that topic and writes the top pages by
total views to Parquet files under ``<workdir>/top-pages``.

    python examples/website_activity.py --bootstrap 127.0.0.1:9092
"""

from __future__ import annotations

import random
import sys
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import _pipeline  # noqa: E402

BASE_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
PAGES = ["/", "/pricing", "/docs", "/blog", "/signup", "/login", "/about", "/careers"]
WEIGHTS = [30, 12, 20, 8, 5, 15, 3, 1]
VIEWS = 3000
TOP = 3


def generate(bootstrap: str, prefix: str) -> dict[str, Any]:
    _pipeline.create_topics(bootstrap, [f"{prefix}-views", f"{prefix}-page-views"])
    rng = random.Random(7)
    per_minute: Counter[str] = Counter()
    totals: Counter[str] = Counter()
    events = []
    for i in range(VIEWS):
        page = rng.choices(PAGES, WEIGHTS)[0]
        user = f"user-{rng.randrange(200)}"
        ts = BASE_MS + i * 100 + rng.randrange(100)  # five minutes of traffic
        events.append((user, {"page": page, "user": user, "ts": ts}))
        per_minute[f"{page}|{(ts // 60_000) * 60_000}"] += 1
        totals[page] += 1
    # One view an hour later moves the watermark past every minute above (it closes them).
    events.append(("user-0", {"page": "/", "user": "user-0", "ts": BASE_MS + 3_600_000}))
    _pipeline.produce_json(bootstrap, f"{prefix}-views", events)
    answer: dict[str, Any] = {
        key: {"page": key.split("|")[0], "minute": int(key.split("|")[1]), "views": n}
        for key, n in per_minute.items()
    }
    ranked = sorted(totals.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP]
    answer["top"] = [{"page": p, "views": n} for p, n in ranked]
    return answer


def run(spark: Any, bootstrap: str, prefix: str, workdir: str) -> None:
    from pyspark.sql import functions as F  # noqa: PLC0415

    views = (
        _pipeline.stream(spark, bootstrap, f"{prefix}-views")
        .select(F.from_json(F.col("value").cast("string"), "page string, user string, ts long").alias("e"))
        .select("e.*")
        .withColumn("event_time", F.timestamp_millis("ts"))
        .withWatermark("event_time", "1 minute")
    )
    counts = views.groupBy("page", F.window("event_time", "1 minute")).count()
    minute = F.unix_millis(F.col("window.start"))
    query = (
        counts.select(
            F.concat_ws("|", "page", minute.cast("string")).alias("key"),
            F.to_json(F.struct("page", minute.alias("minute"), F.col("count").alias("views"))).alias(
                "value"
            ),
        )
        .writeStream.format("strom")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", f"{prefix}-page-views")
        .option("checkpointLocation", f"{workdir}/views-ck")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    # Top pages: a batch job over the per-minute results (latest value per key), to Parquet.
    latest = _pipeline.read_json(spark, bootstrap, f"{prefix}-page-views")
    per_minute = spark.createDataFrame(list(latest.values()), "page string, minute long, views long")
    top = (
        per_minute.groupBy("page")
        .agg(F.sum("views").alias("views"))
        .orderBy(F.desc("views"), "page")
        .limit(TOP)
    )
    top.coalesce(1).write.mode("overwrite").parquet(f"{workdir}/top-pages")


def result(spark: Any, bootstrap: str, prefix: str, workdir: str) -> dict[str, Any]:
    got: dict[str, Any] = _pipeline.read_json(spark, bootstrap, f"{prefix}-page-views")
    top = spark.read.parquet(f"{workdir}/top-pages").orderBy("views", "page", ascending=[False, True])
    got["top"] = [{"page": r.page, "views": r.views} for r in top.collect()]
    return got


if __name__ == "__main__":
    sys.exit(_pipeline.main(sys.modules[__name__]))
