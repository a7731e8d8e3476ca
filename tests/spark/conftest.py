"""Fixtures for the Spark tests: one SparkSession and one broker for the whole test session
(for each pytest-xdist worker that runs Spark tests).

A SparkSession costs tens of seconds to start on a busy 2-core machine, so every Spark test
shares one (``local[2]``); each test uses its own topics and checkpoint directories. Tests that
need a broker of their own (retention, restarts) start one with ``fresh_broker``.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from strom.testing import BrokerProcess  # noqa: E402


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.spark)
            # the first test also pays for the SparkSession's start (tens of seconds when busy)
            item.add_marker(pytest.mark.timeout(600))


@pytest.fixture(scope="session")
def spark_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(
        tmp_path_factory.mktemp("spark-broker") / "data",
        settings={"num.partitions": "1", "log.retention.check.interval.ms": "500"},
    )
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


@functools.cache
def kafka_format_jars() -> tuple[list[str], str | None]:
    """Spark's own Kafka source (``format("kafka")``, tests/spark/test_kafka_format.py): its
    jars resolved by Maven (benchmarks/kafka/pom.xml, cached after the first run), or why they
    are not there."""
    from benchmarks.kafka_jvm import MavenUnavailable, jvm_tools_missing, spark_kafka_jars

    reason = jvm_tools_missing()
    if reason is not None:
        return [], reason
    try:
        return spark_kafka_jars(), None
    except MavenUnavailable as exc:
        return [], str(exc).splitlines()[0]



@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    import strom.spark  # noqa: PLC0415

    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = strom.spark.session(
        app_name="strom-tests",
        master="local[2]",
        config={
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.sql.streaming.pollingDelay": "50ms",
            "spark.python.worker.reuse": "true",
            # Spark's own format("kafka") beside strom's (empty: not on this machine)
            "spark.jars": ",".join(kafka_format_jars()[0]),
        },
        log_level="ERROR",
    )
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def kafka_format(spark: Any) -> Any:
    """The shared session, for a test of Spark's own ``format("kafka")`` (skipped when its jars
    could not be resolved: no java/mvn, or Maven Central out of reach)."""
    jars, missing = kafka_format_jars()
    if missing is not None:
        pytest.skip(f"Spark's Kafka source jars unavailable: {missing}")
    return spark
