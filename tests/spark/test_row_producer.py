"""RowProducer's own lifetime (no Spark needed)."""

from __future__ import annotations

import gc
import weakref

from strom.spark.row_producer import RowProducer


def test_a_dropped_row_producer_frees_its_producer_without_a_collection() -> None:
    """Its delivery callback keeps the first error, not the RowProducer: no reference cycle,
    so a long-lived Spark worker that drops one after a failure frees its librdkafka handle
    (threads, connections) at once, not at some later garbage collection."""
    rows = RowProducer({"bootstrap.servers": "127.0.0.1:1", "logger": _Quiet()}, "t")
    assert rows.producer is not None  # made
    gone = weakref.ref(rows)
    gc.disable()
    try:
        del rows
        assert gone() is None, "something still holds the RowProducer"
    finally:
        gc.enable()


class _Quiet:
    def log(self, *_args: object, **_kwargs: object) -> None:
        pass
