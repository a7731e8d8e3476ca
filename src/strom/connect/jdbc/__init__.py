"""JDBC source and sink connectors with Confluent's class and property names, on SQLAlchemy.

``io.confluent.connect.jdbc.JdbcSourceConnector`` / ``JdbcSinkConnector`` (aliases
``JdbcSource`` / ``JdbcSink``). Needs the ``jdbc`` extra (``sqlalchemy``, ``psycopg``); this
module imports neither, so the worker lists the plugins without it and a connector started
without them fails with one line naming the extra.
"""

from __future__ import annotations

from types import ModuleType

from strom.connect.api import ConnectError, SinkConnector, SourceConnector, Task
from strom.connect.config import ConfigDef
from strom.connect.jdbc.config_defs import SINK_DEF, SOURCE_DEF


def _runtime() -> ModuleType:
    """The modules that need the 'jdbc' extra, or a ConnectError that says how to install it."""
    try:
        from strom.connect.jdbc import runtime  # sqlalchemy: optional, only when a JDBC one runs
    except ImportError as exc:
        raise ConnectError("the JDBC connectors need the 'jdbc' extra: "
                           f"pip install 'strom[jdbc]' (sqlalchemy, psycopg): {exc}") from None
    return runtime


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
        runtime = _runtime()
        parsed = SOURCE_DEF.parse(config)
        self.config = dict(config)
        engine = runtime.connect(parsed)  # FAILED with the reason when the database is unreachable
        try:
            if parsed["query"]:
                self.tables = []
                return
            names = sorted(runtime.inspect(engine).get_table_names())
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
        return _runtime().JdbcSourceTask  # type: ignore[no-any-return]

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
        parsed = SINK_DEF.parse(config)
        _runtime().connect(parsed).dispose()  # FAILED with the reason when the database is unreachable
        self.config = dict(config)

    def task_class(self) -> type[Task]:
        return _runtime().JdbcSinkTask  # type: ignore[no-any-return]

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [dict(self.config) for _ in range(max_tasks)]
