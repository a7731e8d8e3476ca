"""Fixtures for the Spark tests: one SparkSession and one broker for the whole test session
(for each pytest-xdist worker that runs Spark tests).

A SparkSession costs tens of seconds to start on a busy 2-core machine, so every Spark test
shares one (``local[2]``); each test uses its own topics and checkpoint directories. Tests that
need a broker of their own (retention, restarts) start one with ``fresh_broker``.
"""

from __future__ import annotations

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
        },
        log_level="ERROR",
    )
    try:
        yield session
    finally:
        session.stop()
