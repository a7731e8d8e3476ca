"""Driver of the exactly-once failure test (run as a subprocess so the test can kill -9 it).

``python eo_query.py BOOTSTRAP SOURCE SINK CHECKPOINT MARKERS MODE`` runs a topic-to-topic query
``value -> value * 10`` with ``exactlyOnce=true`` on ``local[2,3]`` (each task may be tried 3
times). A map over Arrow batches raises once per (batch, task partition) on the first attempt of
the first batches, after it has passed on half of its rows, so the failed attempt leaves an open
transaction with records in it; the marker file in MARKERS makes the retry pass.

MODE ``stream`` runs until killed (small batches, one per trigger); ``drain`` runs with
``availableNow`` and exits 0 once everything available was written.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc

FAILING_BATCHES = 2  # batch ids below this fail once per task partition


def _fail_once_then_times_ten(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    from pyspark import TaskContext  # noqa: PLC0415

    context = TaskContext.get()
    assert context is not None
    batch_id = int(context.getLocalProperty("streaming.sql.batchId") or "0")
    marker = os.path.join(os.environ["EO_MARKERS"], f"b{batch_id}-p{context.partitionId()}")
    fail = batch_id < FAILING_BATCHES and not os.path.exists(marker)
    for batch in batches:
        numbers = pc.cast(pc.cast(batch.column(0), pa.string()), pa.int64())
        out = pa.RecordBatch.from_arrays(
            [pc.cast(pc.cast(pc.multiply(numbers, 10), pa.string()), pa.binary())], ["value"]
        )
        if fail and out.num_rows > 1:
            yield out.slice(0, out.num_rows // 2)
            open(marker, "w").close()
            raise RuntimeError(f"injected failure: batch {batch_id} task {context.partitionId()}")
        yield out
    if fail:  # an empty task: fail it all the same, once
        open(marker, "w").close()
        raise RuntimeError(f"injected failure: batch {batch_id} task {context.partitionId()}")


def main() -> None:
    bootstrap, source, sink, checkpoint, markers, mode = sys.argv[1:7]
    os.environ["EO_MARKERS"] = markers
    import strom.spark  # noqa: PLC0415

    spark = strom.spark.session(
        app_name="strom-eo-test",
        master="local[2,3]",
        config={
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.executorEnv.EO_MARKERS": markers,
        },
        log_level="ERROR",
    )
    writer = (
        spark.readStream.format("strom")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "40")
        .load()
        .select("value")
        .mapInArrow(_fail_once_then_times_ten, "value binary")
        .writeStream.format("strom")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("exactlyOnce", "true")
        .option("checkpointLocation", checkpoint)
    )
    if mode == "drain":
        query = writer.trigger(availableNow=True).start()
        query.awaitTermination()
        if query.exception() is not None:
            sys.exit(f"query failed: {query.exception()}")
    else:
        query = writer.trigger(processingTime="200 milliseconds").start()
        print("started", flush=True)
        query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
