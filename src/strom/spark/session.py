"""A SparkSession with local defaults for strom, and registration of the ``strom`` format.

:func:`session` builds (or returns the active) SparkSession: ``local[*]``, 4 shuffle
partitions, the UI off, driver bound to 127.0.0.1, quiet logs, Arrow on, and the Python workers
running the interpreter that runs this code (so executors find strom and its dependencies).
Every default can be overridden with ``session(master=..., config={...})`` or the usual
``SPARK_*``/``PYSPARK_*`` environment; a cluster is reached by passing its master URL.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession

DEFAULTS: dict[str, str] = {
    "spark.sql.shuffle.partitions": "4",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.streaming.stopTimeout": "30s",
}


def register(spark: SparkSession) -> SparkSession:
    """Make ``format("strom")`` available in ``spark``."""
    from strom.spark.source import StromDataSource  # noqa: PLC0415

    spark.dataSource.register(StromDataSource)
    return spark


def session(
    app_name: str = "strom",
    master: str | None = None,
    config: Mapping[str, str] | None = None,
    log_level: str = "WARN",
) -> SparkSession:
    """A SparkSession with the ``strom`` format registered (see the module docstring)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.appName(app_name).master(
        master or os.environ.get("SPARK_MASTER", "local[*]")
    )
    settings = dict(DEFAULTS)
    settings["spark.executorEnv.PYTHONPATH"] = os.environ.get("PYTHONPATH", "")
    settings.update(config or {})
    for key, value in settings.items():
        if value != "":
            builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    return register(spark)
