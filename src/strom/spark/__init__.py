"""PySpark pipelines on strom topics: the ``strom`` data source (PySpark >= 4.2).

::

    import strom.spark
    spark = strom.spark.session()          # or: strom.spark.register(your_session)
    df = (spark.readStream.format("strom")
          .option("kafka.bootstrap.servers", "localhost:9092")
          .option("subscribe", "clicks").load())

Importing this package registers the format in the active SparkSession, if there is one.
This is the only strom package that imports pyspark (install ``strom[spark]``).
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from strom.spark.exactly_once import TransactionsUnavailable
from strom.spark.offsets import DataLossError
from strom.spark.options import OptionError
from strom.spark.session import register, session
from strom.spark.source import StromDataSource

__all__ = [
    "DataLossError",
    "OptionError",
    "StromDataSource",
    "TransactionsUnavailable",
    "register",
    "session",
]

_active = SparkSession.getActiveSession()
if _active is not None:
    register(_active)
