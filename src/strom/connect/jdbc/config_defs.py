"""The JDBC connectors' configuration definitions (Confluent's property names, groups and
documentation), apart from the connectors so that their tasks can use them without importing
the connectors' module.
"""

from __future__ import annotations

from typing import Any

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
