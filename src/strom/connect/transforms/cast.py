"""Type-changing transforms: Cast and TimestampConverter (Kafka's names and config keys).

Cast follows Java's numeric casts (integers wrap to the target width, floats truncate toward
zero); a boolean becomes 1/0 and a string is parsed. TimestampConverter goes through
milliseconds since the epoch: ``unix`` values use ``unix.precision``, ``string`` values
``format`` (a Java ``SimpleDateFormat`` pattern), and the logical types Timestamp (ms),
Date (days) and Time (ms of the day) keep their JSON representation.
"""

from __future__ import annotations

import base64
from typing import Any

from strom.connect.api import ConnectRecord
from strom.connect.config import ConfigDef, ConfigKey
from strom.connect.converters import DataError, Schema
from strom.connect.datefmt import PatternError, format_ms, parse_ms, to_strftime
from strom.connect.transforms.base import (
    DATE,
    TIME,
    TIMESTAMP,
    KeyOrValue,
    require_map,
    require_struct,
    struct_schema,
    variants,
)

CAST_TYPES = ("int8", "int16", "int32", "int64", "float32", "float64", "boolean", "string")
_WIDTH = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}
#: spec type -> the schema type (JsonConverter's names for the two float types)
SCHEMA_TYPE = {"float32": "float", "float64": "double"}
DAY_MS = 86_400_000


def _parse_spec(items: list[str]) -> tuple[str | None, dict[str, str]]:
    """(whole-value type, {field: type}); ValueError with Kafka-like wording if bad."""
    if not items:
        raise ValueError("Must specify at least one field to cast.")
    whole: str | None = None
    fields: dict[str, str] = {}
    for item in items:
        name, sep, kind = item.rpartition(":")
        if not sep:
            if len(items) > 1:
                raise ValueError("Cast transformations that specify a type to cast the entire "
                                 "value to may only specify a single cast in their spec")
            name, kind = "", item
        kind = kind.strip().lower()
        if kind not in CAST_TYPES:
            raise ValueError(f"Invalid type found in casting spec: {kind}")
        if sep:
            fields[name.strip()] = kind
        else:
            whole = kind
    return whole, fields


def _wrap(value: int, bits: int) -> int:
    half = 1 << (bits - 1)
    return ((value + half) % (1 << bits)) - half


def cast_value(value: Any, kind: str) -> Any:
    if value is None:
        return None
    if isinstance(value, dict | list):
        raise DataError(f"Cast transformation does not support casting to/from "
                        f"{type(value).__name__}")
    try:
        if kind in _WIDTH:
            if isinstance(value, str):
                number = int(value.strip())
            elif isinstance(value, bytes):
                raise DataError("Cast transformation does not support casting bytes to "
                                f"{kind}")
            else:
                number = int(value)  # bool -> 1/0, float truncates toward zero
            return _wrap(number, _WIDTH[kind])
        if kind in ("float32", "float64"):
            return float(value.strip() if isinstance(value, str) else value)
        if kind == "boolean":
            if isinstance(value, str):
                return value.strip().lower() == "true"  # Boolean.parseBoolean
            return bool(value)
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, bytes):
            return base64.b64encode(value).decode("ascii")
        return str(value)
    except (TypeError, ValueError):
        raise DataError(f"Value {value!r} cannot be cast to {kind}") from None


class Cast(KeyOrValue):
    """``spec=int32`` casts the whole (primitive) value; ``spec=a:int64,b:string`` fields."""

    CONFIG_DEF = ConfigDef([
        ConfigKey("spec", "LIST", importance="HIGH",
                  documentation="List of fields and the type to cast them to of the form "
                  "field1:type,field2:type, or a single type for a primitive key/value.",
                  validator=lambda v: _check(lambda: _parse_spec(v))),
    ])

    def validate_config(self) -> None:
        self.whole, self.fields = _parse_spec(self.config["spec"])

    def transform(self, schema: Schema | None, value: Any, record: ConnectRecord
                  ) -> tuple[Schema | None, Any]:
        if self.whole is not None:
            out = cast_value(value, self.whole)
            if schema is None:
                return None, out
            return Schema(SCHEMA_TYPE.get(self.whole, self.whole), schema.optional), out
        if value is None:
            return schema, None
        if schema is None:
            src = dict(require_map(value, "cast types"))
            for name, kind in self.fields.items():
                if name in src:
                    src[name] = cast_value(src[name], kind)
            return None, src
        require_struct(schema, value, "cast types")
        fields = [(n, Schema(SCHEMA_TYPE.get(self.fields[n], self.fields[n]), s.optional)
                   if n in self.fields else s) for n, s in schema.fields]
        out = {n: cast_value(value.get(n), self.fields[n]) if n in self.fields else
               value.get(n) for n, _ in schema.fields}
        return struct_schema(fields, like=schema), out


def _check(thunk: Any) -> str | None:
    try:
        thunk()
    except ValueError as exc:
        return str(exc)
    return None


TARGET_TYPES = ("string", "unix", "Date", "Time", "Timestamp")
_PRECISION = {"seconds": 1000, "milliseconds": 1, "microseconds": 1 / 1000,
              "nanoseconds": 1 / 1_000_000}


class TimestampConverter(KeyOrValue):
    """Convert a timestamp (the whole value, or ``field``) between string, unix and the
    Timestamp/Date/Time logical types."""

    CONFIG_DEF = ConfigDef([
        ConfigKey("target.type", "STRING", importance="HIGH",
                  documentation="The desired timestamp representation: string, unix, Date, "
                  "Time, or Timestamp",
                  validator=lambda v: None if v in TARGET_TYPES else
                  f"Unknown timestamp type in TimestampConverter: {v}. Valid values are "
                  + ", ".join(TARGET_TYPES) + "."),
        ConfigKey("field", "STRING", "", "HIGH",
                  "The field containing the timestamp, or empty if the entire value is a "
                  "timestamp"),
        ConfigKey("format", "STRING", "", "MEDIUM",
                  "A SimpleDateFormat-compatible format for the timestamp.",
                  validator=lambda v: _check(lambda: to_strftime(v))),
        ConfigKey("unix.precision", "STRING", "milliseconds", "LOW",
                  "The desired Unix precision for the timestamp: seconds, milliseconds, "
                  "microseconds, or nanoseconds.",
                  validator=lambda v: None if v in _PRECISION else
                  "String must be one of: seconds, milliseconds, microseconds, nanoseconds"),
    ])

    def validate_config(self) -> None:
        if self.config["target.type"] == "string" and not self.config["format"]:
            raise ValueError("TimestampConverter requires format option to be specified when "
                             "using string timestamps")

    def _to_ms(self, schema: Schema | None, value: Any) -> int:
        precision = _PRECISION[self.config["unix.precision"]]
        name = schema.name if schema is not None else None
        if name in (TIMESTAMP, TIME):
            return int(value)
        if name == DATE:
            return int(value) * DAY_MS
        if isinstance(value, str):
            if not self.config["format"]:
                raise DataError("TimestampConverter requires format option to be specified "
                                "when using string timestamps")
            try:
                return parse_ms(self.config["format"], value)
            except (ValueError, PatternError):
                raise DataError(f"Could not parse timestamp: value ({value}) does not match "
                                f"pattern ({self.config['format']})") from None
        if isinstance(value, int | float) and not isinstance(value, bool):
            return int(value * precision)
        raise DataError(f"Expected a timestamp, found {type(value).__name__}")

    def _from_ms(self, ms: int, optional: bool) -> tuple[Schema, Any]:
        target = self.config["target.type"]
        if target == "string":
            return Schema("string", optional), format_ms(self.config["format"], ms)
        if target == "unix":
            return Schema("int64", optional), int(ms / _PRECISION[self.config["unix.precision"]])
        if target == "Date":
            return Schema("int32", optional, name=DATE), ms // DAY_MS
        if target == "Time":
            return Schema("int32", optional, name=TIME), ms % DAY_MS
        return Schema("int64", optional, name=TIMESTAMP), ms

    def _convert(self, schema: Schema | None, value: Any) -> tuple[Schema | None, Any]:
        optional = schema.optional if schema is not None else True
        if value is None:
            return (self._from_ms(0, True)[0] if schema is not None else None), None
        new_schema, out = self._from_ms(self._to_ms(schema, value), optional)
        return (new_schema if schema is not None else None), out

    def transform(self, schema: Schema | None, value: Any, record: ConnectRecord
                  ) -> tuple[Schema | None, Any]:
        name = self.config["field"]
        if not name:
            return self._convert(schema, value)
        if value is None:
            return schema, None
        if schema is None:
            out = dict(require_map(value, "converting timestamp formats"))
            out[name] = self._convert(None, out.get(name))[1]
            return None, out
        require_struct(schema, value, "converting timestamp formats")
        fields, out = [], dict(value)
        for n, sub in schema.fields:
            if n == name:
                converted, out[n] = self._convert(sub, value.get(n))
                assert converted is not None
                sub = converted
            fields.append((n, sub))
        return struct_schema(fields, like=schema), out


CastKey, CastValue = variants(Cast)
TimestampConverterKey, TimestampConverterValue = variants(TimestampConverter)
