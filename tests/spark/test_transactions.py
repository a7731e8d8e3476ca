"""Transactions through format("strom"): read_committed reads, and exactly-once topic-to-topic
with task retries, injected task failures and a driver killed and restarted from checkpoint."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from strom.testing import BrokerProcess

from .helpers import consume_all, create_topic, produce, wait_for


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _transactions(bootstrap: str, topic: str) -> tuple[set[bytes], set[bytes]]:
    """Three transactions over both partitions: commit, abort, commit; (committed, aborted)."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": _name("txn-src")})
    producer.init_transactions(30)
    committed: set[bytes] = set()
    aborted: set[bytes] = set()
    for n, outcome in enumerate(("commit", "abort", "commit")):
        producer.begin_transaction()
        values = {b"%s-%d-%d" % (outcome.encode(), n, i) for i in range(20)}
        for i, value in enumerate(sorted(values)):
            producer.produce(topic, value=value, partition=i % 2)
        producer.flush(30)
        if outcome == "commit":
            producer.commit_transaction(30)
            committed |= values
        else:
            producer.abort_transaction(30)
            aborted |= values
    return committed, aborted


def test_read_committed_sees_only_committed_records(
    spark: Any, spark_broker: BrokerProcess, tmp_path: Path
) -> None:
    bootstrap = spark_broker.bootstrap
    topic = _name("txn-read")
    create_topic(bootstrap, topic, 2)
    committed, aborted = _transactions(bootstrap, topic)
    # a non-transactional tail after the last marker: reads must pass every marker to reach it
    produce(bootstrap, topic, [{"value": b"tail", "partition": 0}])
    committed.add(b"tail")

    def batch(level: str) -> list[Any]:
        return (
            spark.read.format("strom")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("isolation.level", level)
            .load()
            .collect()
        )

    rows = batch("read_committed")
    assert sorted(r.value for r in rows) == sorted(committed)
    assert len({(r.partition, r.offset) for r in rows}) == len(rows)
    everything = batch("read_uncommitted")
    assert sorted(r.value for r in everything) == sorted(committed | aborted)
    # the offsets the committed rows carry are those of the same records read uncommitted
    placed = {r.value: (r.partition, r.offset) for r in everything}
    assert all(placed[r.value] == (r.partition, r.offset) for r in rows)

    seen: list[bytes] = []
    query = (
        spark.readStream.format("strom")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("isolation.level", "read_committed")
        .option("maxOffsetsPerTrigger", "7")  # ranges that end on and between markers
        .load()
        .writeStream.foreachBatch(lambda df, _id: seen.extend(r.value for r in df.collect()))
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(240), "streaming read_committed stalled"
    assert query.exception() is None
    assert sorted(seen) == sorted(committed)


def _run_driver(args: list[str], mode: str, log: Path) -> subprocess.Popen[bytes]:
    driver = Path(__file__).with_name("eo_query.py")
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, str(driver), *args, mode],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: the JVM and workers die with it
        )


@pytest.mark.slow
def test_exactly_once_with_task_failures_and_driver_kill(
    spark_broker: BrokerProcess, tmp_path: Path
) -> None:
    bootstrap = spark_broker.bootstrap
    source, sink = _name("eo-fail-in"), _name("eo-fail-out")
    create_topic(bootstrap, source, 2)
    create_topic(bootstrap, sink, 2)
    total = 240
    produce(bootstrap, source, [{"value": b"%d" % i, "partition": i % 2} for i in range(total)])
    markers = tmp_path / "markers"
    markers.mkdir()
    args = [bootstrap, source, sink, str(tmp_path / "ck"), str(markers)]
    log = tmp_path / "driver.log"

    def committed_output() -> list[int]:
        out = consume_all(bootstrap, sink, [0, 1], **{"isolation.level": "read_committed"})
        return [int(m.value()) for m in out]

    first = _run_driver(args, "stream", log)
    try:
        # kill -9 once some batches are committed and before the query has caught up
        wait_for(lambda: len(committed_output()) >= 40 or first.poll() is not None, 150,
                 "the first driver to commit output")  # fmt: skip
        assert first.poll() is None, log.read_text()[-3000:]
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(30)
    partial = committed_output()
    assert len(partial) < total, "the query finished before the kill: nothing was tested"
    assert len(partial) == len(set(partial))

    second = _run_driver(args, "drain", log)
    try:
        assert second.wait(240) == 0, log.read_text()[-3000:]
    finally:
        if second.poll() is None:
            os.killpg(second.pid, signal.SIGKILL)
            second.wait(30)
    # the injected failures happened (first attempts failed, with rows already produced)
    assert len(list(markers.iterdir())) >= 2
    assert sorted(committed_output()) == [10 * i for i in range(total)]
