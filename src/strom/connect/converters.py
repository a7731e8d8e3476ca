"""Converters between Connect data (Python values + optional schema) and record bytes.

``JsonConverter`` with ``schemas.enable=true`` (Kafka's default) writes Kafka Connect's
envelope ``{"schema": {...} | null, "payload": ...}`` and requires it when reading; with
``false`` it reads and writes plain JSON. ``StringConverter`` encodes ``str(value)`` in
``converter.encoding`` (UTF-8); ``ByteArrayConverter`` passes bytes through. A null value is
a tombstone both ways. Schemas are :class:`Schema` objects, JSON-compatible with Kafka's.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any


class DataError(ValueError):
    """Data that does not convert (Kafka's DataException)."""


@dataclass(frozen=True)
class Schema:
    """A Connect schema: int8..int64, float32/64, boolean, string, bytes, array, map, struct."""

    type: str
    optional: bool = False
    name: str | None = None
    fields: tuple[tuple[str, Schema], ...] = ()
    items: Schema | None = None
    keys: Schema | None = None
    values: Schema | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def as_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"type": self.type, "optional": self.optional}
        if self.name:
            doc["name"] = self.name
        if self.type == "struct":
            doc["fields"] = [{**s.as_json(), "field": n} for n, s in self.fields]
        if self.items is not None:
            doc["items"] = self.items.as_json()
        if self.keys is not None and self.values is not None:
            doc["keys"] = self.keys.as_json()
            doc["values"] = self.values.as_json()
        return doc

    @classmethod
    def from_json(cls, doc: Any) -> Schema:
        if not isinstance(doc, dict) or not isinstance(doc.get("type"), str):
            raise DataError("Schema must contain 'type' field")
        kind = doc["type"]
        fields = tuple((f["field"], cls.from_json(f)) for f in doc.get("fields") or ())
        return cls(
            type=kind,
            optional=bool(doc.get("optional", False)),
            name=doc.get("name"),
            fields=fields,
            items=cls.from_json(doc["items"]) if "items" in doc else None,
            keys=cls.from_json(doc["keys"]) if "keys" in doc else None,
            values=cls.from_json(doc["values"]) if "values" in doc else None,
        )


STRING_SCHEMA = Schema("string")
OPTIONAL_STRING_SCHEMA = Schema("string", optional=True)


class Converter:
    """Base converter; ``configure`` gets the ``*.converter.``-stripped settings."""

    def __init__(self) -> None:
        self.is_key = False
        self.config: dict[str, str] = {}

    def configure(self, config: dict[str, str], is_key: bool) -> None:
        self.config = dict(config)
        self.is_key = is_key

    def from_connect_data(self, topic: str, schema: Schema | None, value: Any) -> bytes | None:
        raise NotImplementedError

    def to_connect_data(self, topic: str, data: bytes | None) -> tuple[Schema | None, Any]:
        raise NotImplementedError


class StringConverter(Converter):
    encoding = "utf-8"

    def configure(self, config: dict[str, str], is_key: bool) -> None:
        super().configure(config, is_key)
        name = "key.converter.encoding" if is_key else "value.converter.encoding"
        self.encoding = config.get(name) or config.get("converter.encoding") or "utf-8"

    def from_connect_data(self, topic: str, schema: Schema | None, value: Any) -> bytes | None:
        if value is None:
            return None
        if isinstance(value, str):
            return value.encode(self.encoding)
        if isinstance(value, bytes):
            return value
        return str(value).encode(self.encoding)

    def to_connect_data(self, topic: str, data: bytes | None) -> tuple[Schema | None, Any]:
        if data is None:
            return OPTIONAL_STRING_SCHEMA, None
        try:
            return OPTIONAL_STRING_SCHEMA, data.decode(self.encoding)
        except UnicodeDecodeError as exc:
            raise DataError(f"Failed to deserialize string: {exc}") from None


class ByteArrayConverter(Converter):
    def from_connect_data(self, topic: str, schema: Schema | None, value: Any) -> bytes | None:
        if value is None:
            return None
        if isinstance(value, bytearray | memoryview):
            return bytes(value)
        if not isinstance(value, bytes):
            raise DataError(f"ByteArrayConverter is not compatible with objects of type "
                            f"{type(value).__name__}")
        return value

    def to_connect_data(self, topic: str, data: bytes | None) -> tuple[Schema | None, Any]:
        return Schema("bytes", optional=True), data


def _to_json_value(schema: Schema | None, value: Any) -> Any:
    """Connect value -> JSON value (bytes become base64 as Kafka's JsonConverter writes)."""
    if value is None:
        return None
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, dict):
        sub = dict(schema.fields) if schema is not None and schema.type == "struct" else {}
        vals = schema.values if schema is not None else None
        return {str(k): _to_json_value(sub.get(str(k), vals), v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        items = schema.items if schema is not None else None
        return [_to_json_value(items, v) for v in value]
    return value


def _from_json_value(schema: Schema, value: Any) -> Any:
    """JSON payload -> Connect value following ``schema``."""
    if value is None:
        if not schema.optional:
            raise DataError(f"Invalid null value for required {schema.type} field")
        return None
    kind = schema.type
    if kind == "bytes":
        try:
            return base64.b64decode(value)
        except (ValueError, TypeError):
            raise DataError("Invalid bytes field") from None
    if kind == "struct":
        if not isinstance(value, dict):
            raise DataError("Structs should be encoded as JSON objects")
        return {n: _from_json_value(s, value.get(n)) for n, s in schema.fields}
    if kind == "array" and schema.items is not None:
        return [_from_json_value(schema.items, v) for v in value]
    if kind == "map" and schema.values is not None:
        return {k: _from_json_value(schema.values, v) for k, v in value.items()}
    if kind.startswith("int") and not isinstance(value, int):
        raise DataError(f"Invalid {kind} value {value!r}")
    return value


_ENVELOPE_ERROR = (
    'JsonConverter with schemas.enable requires "schema" and "payload" fields and may not '
    "contain additional fields. If you are trying to deserialize plain JSON data, set "
    "schemas.enable=false in your converter configuration."
)


class JsonConverter(Converter):
    """UTF-8 JSON without ASCII escapes, compact separators: the bytes Kafka's (Jackson) writes.

    Schemas are cached both ways (Kafka's ``schemas.cache.size``, 1000): records of a topic
    share a few schemas, and parsing or rendering one per record was most of the cost.
    """

    def __init__(self) -> None:
        super().__init__()
        self._parsed: dict[str, Schema] = {}  # repr of the schema's JSON -> Schema
        self._rendered: dict[Schema, str] = {}  # Schema -> its JSON text

    @property
    def schemas_enable(self) -> bool:
        return str(self.config.get("schemas.enable", "true")).lower() == "true"

    def _cache_size(self) -> int:
        try:
            return max(int(self.config.get("schemas.cache.size", 1000)), 0)
        except ValueError:
            return 1000

    def _schema_json(self, schema: Schema) -> str:
        text = self._rendered.get(schema)
        if text is None:
            text = json.dumps(schema.as_json(), separators=(",", ":"), ensure_ascii=False)
            if len(self._rendered) >= self._cache_size():
                self._rendered.clear()
            self._rendered[schema] = text
        return text

    def _schema_from(self, doc: Any) -> Schema:
        key = repr(doc)  # JSON-decoded values: equal reprs are equal documents
        schema = self._parsed.get(key)
        if schema is None:
            schema = Schema.from_json(doc)
            if len(self._parsed) >= self._cache_size():
                self._parsed.clear()
            self._parsed[key] = schema
        return schema

    def from_connect_data(self, topic: str, schema: Schema | None, value: Any) -> bytes | None:
        if value is None and not self.schemas_enable:
            return None
        payload = json.dumps(_to_json_value(schema, value), separators=(",", ":"),
                             ensure_ascii=False)
        if self.schemas_enable:
            # The bytes json.dumps would give for {"schema": ..., "payload": ...}.
            schema_text = self._schema_json(schema) if schema else "null"
            return f'{{"schema":{schema_text},"payload":{payload}}}'.encode()
        return payload.encode()

    def to_connect_data(self, topic: str, data: bytes | None) -> tuple[Schema | None, Any]:
        if data is None:
            return None, None
        try:
            doc = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise DataError(f"Converting byte[] to Kafka Connect data failed due to "
                            f"serialization error: {exc}") from None
        if not self.schemas_enable:
            return None, doc
        if not isinstance(doc, dict) or set(doc) != {"schema", "payload"}:
            raise DataError(_ENVELOPE_ERROR)
        if doc["schema"] is None:
            return None, doc["payload"]
        schema = self._schema_from(doc["schema"])
        return schema, _from_json_value(schema, doc["payload"])
