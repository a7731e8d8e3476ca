"""JDBC source and sink connectors with Confluent's class and property names, on SQLAlchemy.

``io.confluent.connect.jdbc.JdbcSourceConnector`` / ``JdbcSinkConnector`` (aliases
``JdbcSource`` / ``JdbcSink``). Needs the ``jdbc`` extra (``sqlalchemy``, ``psycopg``); this
module imports neither, so the worker lists the plugins without it and a connector started
without them fails with one line naming the extra.
"""

from __future__ import annotations

from typing import Any

from strom.connect.api import ConnectError, SinkConnector, SourceConnector, Task
from strom.connect.config import ConfigDef, ConfigKey, at_least, non_empty_string

MODES = ("bulk", "incrementing", "timestamp", "timestamp+incrementing")


def _one_of(*values: str) -> Any:
    def check(value: Any) -> str | None:
        return None if value in values else "String must be one of: " + ", ".join(values)
    return check


CONNECTION_DEF = ConfigDef([
    ConfigKey("connection.url", "STRING", importance="HIGH", group="Database",
              documentation="JDBC connection URL (jdbc:postgresql://..., jdbc:sqlite:...) or a "
              "SQLAlchemy URL.", validator=non_empty_string),
    ConfigKey("connection.user", "STRING", None, "HIGH", "JDBC connection user.",
              group="Database"),
    ConfigKey("connection.password", "PASSWORD", None, "HIGH", "JDBC connection password.",
              group="Database"),
    ConfigKey("connection.attempts", "INT", 3, "LOW", "Maximum number of attempts to "
              "retrieve a valid JDBC connection.", group="Database", validator=at_least(1)),
    ConfigKey("connection.backoff.ms", "LONG", 10000, "LOW", "Backoff time in milliseconds "
              "between connection attempts.", group="Database", validator=at_least(0)),
])

SOURCE_DEF = CONNECTION_DEF.merged(ConfigDef([
    ConfigKey("table.whitelist", "LIST", [], "MEDIUM", "List of tables to include in "
              "copying.", group="Database"),
    ConfigKey("table.blacklist", "LIST", [], "MEDIUM", "List of tables to exclude from "
              "copying.", group="Database"),
    ConfigKey("query", "STRING", "", "MEDIUM", "If specified, the query to perform to select "
              "new or updated rows (instead of whole tables).", group="Mode"),
    ConfigKey("mode", "STRING", importance="HIGH", group="Mode",
              documentation="The mode for updating a table each time it is polled: bulk, "
              "incrementing, timestamp, timestamp+incrementing.", validator=_one_of(*MODES)),
    ConfigKey("incrementing.column.name", "STRING", "", "MEDIUM", "The name of the strictly "
              "incrementing column to use to detect new rows.", group="Mode"),
    ConfigKey("timestamp.column.name", "LIST", [], "MEDIUM", "Timestamp column(s) to detect "
              "new or modified rows (the first non-null one counts).", group="Mode"),
    ConfigKey("timestamp.initial", "LONG", None, "LOW", "Epoch ms of the first timestamp to "
              "read (default: from the beginning).", group="Mode"),
    ConfigKey("timestamp.delay.interval.ms", "LONG", 0, "HIGH", "How long to wait after a "
              "row with a certain timestamp appears before including it.", group="Mode",
              validator=at_least(0)),
    ConfigKey("validate.non.null", "BOOLEAN", True, "LOW", "Accepted for compatibility.",
              group="Mode"),
    ConfigKey("poll.interval.ms", "INT", 5000, "HIGH", "Frequency in ms to poll for new data "
              "in each table.", group="Connector", validator=at_least(1)),
    ConfigKey("batch.max.rows", "INT", 100, "LOW", "Maximum number of rows to include in a "
              "single batch when polling for new data.", group="Connector",
              validator=at_least(1)),
    ConfigKey("topic.prefix", "STRING", importance="HIGH", group="Connector",
              documentation="Prefix to prepend to table names to generate the name of the "
              "topic (the whole topic name with 'query')."),
    ConfigKey("table.poll.interval.ms", "LONG", 60000, "LOW", "Accepted for compatibility "
              "(tables are listed when the connector starts).", group="Connector"),
]))

SINK_DEF = CONNECTION_DEF.merged(ConfigDef([
    ConfigKey("insert.mode", "STRING", "insert", "HIGH", "insert, upsert or update.",
              group="Writes", validator=_one_of("insert", "upsert", "update")),
    ConfigKey("batch.size", "INT", 3000, "MEDIUM", "Records to batch together for insertion "
              "into the destination table.", group="Writes", validator=at_least(1)),
    ConfigKey("delete.enabled", "BOOLEAN", False, "MEDIUM", "Treat null record values as "
              "deletes (requires pk.mode record_key).", group="Writes"),
    ConfigKey("table.name.format", "STRING", "${topic}", "MEDIUM", "Destination table name "
              "format; ${topic} is the record's topic.", group="Data Mapping"),
    ConfigKey("pk.mode", "STRING", "none", "HIGH", "none, kafka, record_key, record_value.",
              group="Data Mapping",
              validator=_one_of("none", "kafka", "record_key", "record_value")),
    ConfigKey("pk.fields", "LIST", [], "MEDIUM", "Primary key field names (meaning depends "
              "on pk.mode).", group="Data Mapping"),
    ConfigKey("fields.whitelist", "LIST", [], "MEDIUM", "Record value fields to use (all if "
              "empty).", group="Data Mapping"),
    ConfigKey("auto.create", "BOOLEAN", False, "MEDIUM", "Create a missing destination table "
              "from the record schema.", group="DDL Support"),
    ConfigKey("auto.evolve", "BOOLEAN", False, "MEDIUM", "Add missing columns to the "
              "destination table.", group="DDL Support"),
    ConfigKey("max.retries", "INT", 10, "MEDIUM", "Retries on a database error before the "
              "task fails.", group="Retries", validator=at_least(0)),
    ConfigKey("retry.backoff.ms", "INT", 3000, "MEDIUM", "Wait in ms before a retry.",
              group="Retries", validator=at_least(0)),
]))


def _require_extra() -> None:
    try:
        import sqlalchemy  # noqa: F401
    except ImportError:
        raise ConnectError("the JDBC connectors need the 'jdbc' extra: "
                           "pip install 'strom[jdbc]' (sqlalchemy, psycopg)") from None


class JdbcSourceConnector(SourceConnector):
    """Lists the tables when it starts and spreads them over at most ``tasks.max`` tasks."""

    def __init__(self) -> None:
        super().__init__()
        self.config: dict[str, str] = {}
        self.tables: list[str] = []

    @classmethod
    def config_def(cls) -> ConfigDef:
        return SOURCE_DEF

    def validate(self, config: dict[str, str]) -> dict[str, list[str]]:
        errors: dict[str, list[str]] = {}
        mode = config.get("mode", "")
        if config.get("query", "").strip() and config.get("table.whitelist", "").strip():
            errors["query"] = ["Do not specify table filtering with query: 'query' and "
                               "'table.whitelist' are mutually exclusive"]
        if "incrementing" in mode and not config.get("incrementing.column.name", "").strip():
            errors["incrementing.column.name"] = [f"Mode {mode} requires "
                                                  "incrementing.column.name"]
        if "timestamp" in mode and not config.get("timestamp.column.name", "").strip():
            errors["timestamp.column.name"] = [f"Mode {mode} requires timestamp.column.name"]
        return errors

    def start(self, config: dict[str, str]) -> None:
        _require_extra()
        from sqlalchemy import inspect

        from strom.connect.jdbc.db import connect

        parsed = SOURCE_DEF.parse(config)
        self.config = dict(config)
        engine = connect(parsed)  # FAILED with the reason when the database is unreachable
        try:
            if parsed["query"]:
                self.tables = []
                return
            names = sorted(inspect(engine).get_table_names())
        finally:
            engine.dispose()
        wanted = parsed["table.whitelist"]
        if wanted:
            missing = [t for t in wanted if t not in names]
            if missing:
                raise ConnectError(f"Tables in table.whitelist not found: {missing}")
            names = list(wanted)
        self.tables = [t for t in names if t not in parsed["table.blacklist"]]

    def task_class(self) -> type[Task]:
        from strom.connect.jdbc.source import JdbcSourceTask

        return JdbcSourceTask

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        if self.config.get("query", "").strip():
            return [dict(self.config)]
        groups = [self.tables[i::max_tasks] for i in range(min(max_tasks, len(self.tables)))]
        return [{**self.config, "tables": ",".join(g)} for g in groups]


class JdbcSinkConnector(SinkConnector):
    def __init__(self) -> None:
        super().__init__()
        self.config: dict[str, str] = {}

    @classmethod
    def config_def(cls) -> ConfigDef:
        return SINK_DEF

    def validate(self, config: dict[str, str]) -> dict[str, list[str]]:
        errors: dict[str, list[str]] = {}
        pk_mode = config.get("pk.mode", "none")
        if config.get("insert.mode", "insert") in ("upsert", "update") and pk_mode == "none":
            errors["pk.mode"] = [f"insert.mode {config.get('insert.mode')} needs a primary "
                                 "key: set pk.mode to record_key, record_value or kafka"]
        if config.get("delete.enabled", "false").lower() == "true" and pk_mode != "record_key":
            errors["delete.enabled"] = ["Deletes are only supported for pk.mode record_key"]
        return errors

    def start(self, config: dict[str, str]) -> None:
        _require_extra()
        from strom.connect.jdbc.db import connect

        parsed = SINK_DEF.parse(config)
        connect(parsed).dispose()  # FAILED with the reason when the database is unreachable
        self.config = dict(config)

    def task_class(self) -> type[Task]:
        from strom.connect.jdbc.sink import JdbcSinkTask

        return JdbcSinkTask

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [dict(self.config) for _ in range(max_tasks)]
