"""strom Connect: a Kafka Connect runtime in Python (connector API, converters, worker, REST).

Connector authors import from here; the worker lives in :mod:`strom.connect.standalone`.
"""

from strom.connect.api import (
    ConnectError,
    Connector,
    ConnectRecord,
    RetriableError,
    SinkConnector,
    SinkRecord,
    SinkTask,
    SourceConnector,
    SourceRecord,
    SourceTask,
    Task,
)
from strom.connect.config import ConfigDef, ConfigKey, ConfigValue
from strom.connect.converters import (
    ByteArrayConverter,
    Converter,
    DataError,
    JsonConverter,
    Schema,
    StringConverter,
)

__all__ = [
    "ByteArrayConverter", "ConfigDef", "ConfigKey", "ConfigValue", "ConnectError",
    "ConnectRecord", "Connector", "Converter", "DataError", "JsonConverter", "RetriableError",
    "Schema", "SinkConnector", "SinkRecord", "SinkTask", "SourceConnector", "SourceRecord",
    "SourceTask", "StringConverter", "Task",
]
