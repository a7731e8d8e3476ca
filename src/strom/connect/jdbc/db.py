"""Database access for the JDBC connectors through SQLAlchemy (PostgreSQL and SQLite).

``connection.url`` takes the JDBC URLs Confluent's connector is configured with
(``jdbc:postgresql://host:5432/db?user=u&password=p``, ``jdbc:sqlite:/path/file.db``) or a
SQLAlchemy URL (``postgresql://...``, ``sqlite:///...``); ``connection.user`` and
``connection.password`` override the URL's. PostgreSQL goes through psycopg 3 with the session
time zone set to UTC, so naive timestamps are UTC on both sides. ``connection.attempts`` /
``connection.backoff.ms`` retry the first connection, as Confluent's connector does; what
remains is a :class:`~strom.connect.api.ConnectError` naming the database and the cause.

Column types map to Connect schemas (and back, for ``auto.create``/``auto.evolve``):
integers by width (SQLite's INTEGER is 64-bit), floats and NUMERIC/DECIMAL to double (what
Confluent's ``numeric.mapping=best_fit`` gives for most columns; the Decimal logical type is
not produced), text to string, binary to bytes, TIMESTAMP/DATE/TIME to Kafka's logical types
(milliseconds / days / milliseconds of the day).
"""

from __future__ import annotations

import datetime as dt
import json
import time
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine, make_url

from strom.connect.api import ConnectError
from strom.connect.converters import Schema
from strom.connect.transforms.base import DATE, TIME, TIMESTAMP

EPOCH = dt.datetime(1970, 1, 1)
DAY_MS = 86_400_000


def sqlalchemy_url(url: str, user: str | None = None, password: str | None = None) -> URL:
    """A SQLAlchemy URL for a JDBC or SQLAlchemy ``connection.url``."""
    text = url.strip()
    if text.startswith("jdbc:sqlite:"):
        path = text[len("jdbc:sqlite:"):]
        result = make_url("sqlite://") if path in ("", ":memory:") else \
            URL.create("sqlite", database=path)
    elif text.startswith("jdbc:postgresql:"):
        parts = urlsplit(text[len("jdbc:"):])
        query = dict(parse_qsl(parts.query))
        result = URL.create("postgresql+psycopg", username=query.pop("user", None),
                            password=query.pop("password", None),
                            host=parts.hostname or "localhost", port=parts.port or 5432,
                            database=parts.path.lstrip("/") or None, query=query)
    else:
        result = make_url(text)
        if result.drivername in ("postgresql", "postgres"):
            result = result.set(drivername="postgresql+psycopg")
    if user:
        result = result.set(username=user)
    if password:
        result = result.set(password=password)
    return result


def connect(config: dict[str, Any]) -> Engine:
    """An engine whose first connection worked (``connection.attempts`` tries)."""
    url = sqlalchemy_url(config["connection.url"], config.get("connection.user"),
                         config.get("connection.password"))
    kwargs: dict[str, Any] = {"pool_pre_ping": True}
    if url.get_backend_name() == "postgresql":
        kwargs["connect_args"] = {"connect_timeout": 10, "options": "-c timezone=UTC"}
    elif url.get_backend_name() == "sqlite":
        kwargs["connect_args"] = {"timeout": 30}
    engine = sa.create_engine(url, **kwargs)
    attempts = max(int(config.get("connection.attempts", 3)), 1)
    for attempt in range(1, attempts + 1):
        try:
            with engine.connect() as conn:
                conn.execute(sa.text("SELECT 1"))
            return engine
        except sa.exc.SQLAlchemyError as exc:
            if attempt == attempts:
                engine.dispose()
                cause = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
                raise ConnectError(f"Could not connect to {url.render_as_string()} after "
                                   f"{attempts} attempt(s): {cause}") from exc
            time.sleep(int(config.get("connection.backoff.ms", 10000)) / 1000.0)
    raise AssertionError("unreachable")


def column_schema(column_type: Any, nullable: bool, dialect: str) -> Schema:
    """The Connect schema of a reflected column."""
    t = column_type
    kind = "string"
    name = None
    if isinstance(t, sa.Boolean):
        kind = "boolean"
    elif isinstance(t, sa.SmallInteger):
        kind = "int16"
    elif isinstance(t, sa.BigInteger):
        kind = "int64"
    elif isinstance(t, sa.Integer):
        kind = "int64" if dialect == "sqlite" else "int32"
    elif isinstance(t, sa.Float | sa.Numeric):
        kind = "double"
    elif isinstance(t, sa.DateTime):
        kind, name = "int64", TIMESTAMP
    elif isinstance(t, sa.Date):
        kind, name = "int32", DATE
    elif isinstance(t, sa.Time):
        kind, name = "int32", TIME
    elif isinstance(t, sa.LargeBinary):
        kind = "bytes"
    return Schema(kind, optional=nullable, name=name)


def to_ms(value: dt.datetime) -> int:
    if value.tzinfo is not None:
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    delta = value - EPOCH
    return delta.days * DAY_MS + delta.seconds * 1000 + delta.microseconds // 1000


def from_ms(ms: int) -> dt.datetime:
    return EPOCH + dt.timedelta(milliseconds=ms)


def connect_value(value: Any) -> Any:
    """A column value as Connect data (the logical types' JSON representation)."""
    if value is None or isinstance(value, bool | int | float | str | bytes):
        return value
    if isinstance(value, dt.datetime):
        return to_ms(value)
    if isinstance(value, dt.date):
        return (value - EPOCH.date()).days
    if isinstance(value, dt.time):
        return ((value.hour * 60 + value.minute) * 60 + value.second) * 1000 + \
            value.microsecond // 1000
    if isinstance(value, memoryview | bytearray):
        return bytes(value)
    if hasattr(value, "is_finite"):  # Decimal
        return float(value)
    return str(value)


def sql_type(schema: Schema | None, sample: Any = None) -> Any:
    """The column type for a Connect schema (or, schemaless, for a sample value)."""
    if schema is None:
        if isinstance(sample, bool):
            return sa.Boolean()
        if isinstance(sample, int):
            return sa.BigInteger()
        if isinstance(sample, float):
            return sa.Double()
        if isinstance(sample, bytes):
            return sa.LargeBinary()
        return sa.Text()
    if schema.name == TIMESTAMP:
        return sa.DateTime()
    if schema.name == DATE:
        return sa.Date()
    if schema.name == TIME:
        return sa.Time()
    return {"int8": sa.SmallInteger(), "int16": sa.SmallInteger(), "int32": sa.Integer(),
            "int64": sa.BigInteger(), "float": sa.Float(), "double": sa.Double(),
            "boolean": sa.Boolean(), "bytes": sa.LargeBinary()}.get(schema.type, sa.Text())


def db_value(schema: Schema | None, value: Any) -> Any:
    """A Connect value as the database driver wants it."""
    if value is None:
        return None
    if schema is not None and schema.name == TIMESTAMP:
        return from_ms(int(value))
    if schema is not None and schema.name == DATE:
        return (EPOCH + dt.timedelta(days=int(value))).date()
    if schema is not None and schema.name == TIME:
        return (EPOCH + dt.timedelta(milliseconds=int(value))).time()
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return value
