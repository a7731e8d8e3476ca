"""Field-level transforms: InsertField, ReplaceField, ExtractField, ValueToKey, HoistField,
MaskField (Kafka's names, config keys and behaviour, schemaless maps and structs alike).

A tombstone (null value) passes InsertField, ReplaceField and MaskField unchanged, as Kafka's.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from strom.connect.api import ConnectRecord, SinkRecord
from strom.connect.config import ConfigDef, ConfigKey
from strom.connect.converters import STRING_SCHEMA, DataError, Schema
from strom.connect.transforms.base import (
    OPTIONAL_TIMESTAMP_SCHEMA,
    TIMESTAMP_SCHEMA,
    KeyOrValue,
    R,
    Transformation,
    field_schema,
    require_map,
    require_struct,
    struct_schema,
    updated,
    variants,
)


def _non_empty(value: Any) -> str | None:
    return "must not be empty" if not value else None


class InsertField(KeyOrValue):
    """Insert the record's topic, partition, offset (sinks), timestamp and/or a static value.

    A field name ending in ``!`` is required in the new schema, ``?`` (or nothing) optional.
    """

    CONFIG_DEF = ConfigDef([
        ConfigKey("topic.field", "STRING", None, "MEDIUM", "Field name for Kafka topic."),
        ConfigKey("partition.field", "STRING", None, "MEDIUM",
                  "Field name for Kafka partition."),
        ConfigKey("offset.field", "STRING", None, "MEDIUM",
                  "Field name for Kafka offset (sink connectors only)."),
        ConfigKey("timestamp.field", "STRING", None, "MEDIUM",
                  "Field name for record timestamp."),
        ConfigKey("static.field", "STRING", None, "MEDIUM", "Field name for static data."),
        ConfigKey("static.value", "STRING", None, "MEDIUM", "Static field value."),
    ])

    def _fields(self) -> list[tuple[str, bool, str]]:
        out = []
        for kind in ("topic", "partition", "offset", "timestamp", "static"):
            spec = self.config.get(f"{kind}.field")
            if spec:
                required = spec.endswith("!")
                name = spec[:-1] if spec[-1] in "!?" else spec
                out.append((name, required, kind))
        return out

    def _value_of(self, kind: str, record: ConnectRecord) -> Any:
        if kind == "topic":
            return record.topic
        if kind == "partition":
            return record.partition
        if kind == "offset":
            if not isinstance(record, SinkRecord):
                raise DataError("Offset field can only be inserted into sink records")
            return record.kafka_offset
        if kind == "timestamp":
            return record.timestamp
        return self.config.get("static.value")

    @staticmethod
    def _schema_of(kind: str, required: bool) -> Schema:
        base = {"topic": STRING_SCHEMA, "partition": Schema("int32"),
                "offset": Schema("int64"), "static": STRING_SCHEMA}.get(kind)
        if kind == "timestamp":
            return TIMESTAMP_SCHEMA if required else OPTIONAL_TIMESTAMP_SCHEMA
        assert base is not None
        return base if required else Schema(base.type, optional=True)

    def transform(self, schema: Schema | None, value: Any, record: ConnectRecord
                  ) -> tuple[Schema | None, Any]:
        if value is None:
            return schema, value
        if schema is None:
            out = dict(require_map(value, "field insertion"))
            for name, _, kind in self._fields():
                out[name] = self._value_of(kind, record)
            return None, out
        require_struct(schema, value, "field insertion")
        fields = list(schema.fields)
        out = dict(value)
        for name, required, kind in self._fields():
            fields.append((name, self._schema_of(kind, required)))
            out[name] = self._value_of(kind, record)
        return struct_schema(fields, like=schema), out


def _split_renames(items: list[str]) -> dict[str, str]:
    renames = {}
    for item in items:
        old, sep, new = item.partition(":")
        if not sep or not old or not new:
            raise ValueError(f"Invalid rename mapping: {item}")
        renames[old] = new
    return renames


class ReplaceField(KeyOrValue):
    """Keep (``include``), drop (``exclude``) and rename (``renames=old:new,...``) fields."""

    CONFIG_DEF = ConfigDef([
        ConfigKey("exclude", "LIST", [], "MEDIUM", "Fields to exclude."),
        ConfigKey("include", "LIST", [], "MEDIUM", "Fields to include (all if empty)."),
        ConfigKey("renames", "LIST", [], "MEDIUM", "Field rename mappings old:new."),
        ConfigKey("blacklist", "LIST", None, "LOW", "Deprecated: use exclude."),
        ConfigKey("whitelist", "LIST", None, "LOW", "Deprecated: use include."),
    ])

    def validate_config(self) -> None:
        self.exclude = set(self.config.get("blacklist") or self.config["exclude"])
        self.include = set(self.config.get("whitelist") or self.config["include"])
        self.renames = _split_renames(self.config["renames"])

    def _keep(self, name: str) -> bool:
        return name not in self.exclude and (not self.include or name in self.include)

    def transform(self, schema: Schema | None, value: Any, record: ConnectRecord
                  ) -> tuple[Schema | None, Any]:
        if value is None:
            return schema, value
        if schema is None:
            src = require_map(value, "field replacement")
            return None, {self.renames.get(k, k): v for k, v in src.items() if self._keep(k)}
        require_struct(schema, value, "field replacement")
        fields = [(self.renames.get(n, n), s) for n, s in schema.fields if self._keep(n)]
        out = {self.renames.get(n, n): value.get(n) for n, _ in schema.fields if self._keep(n)}
        return struct_schema(fields, like=schema), out


class ExtractField(KeyOrValue):
    """Replace the key or value with one of its fields (null if the map lacks it)."""

    CONFIG_DEF = ConfigDef([
        ConfigKey("field", "STRING", importance="MEDIUM",
                  documentation="Field name to extract.", validator=_non_empty),
        ConfigKey("field.syntax.version", "STRING", "V1", "LOW",
                  "V1: field names are plain names (V2 dotted paths are not supported)."),
    ])

    def transform(self, schema: Schema | None, value: Any, record: ConnectRecord
                  ) -> tuple[Schema | None, Any]:
        name = self.config["field"]
        if schema is None:
            if value is None:
                return None, None
            return None, require_map(value, "field extraction").get(name)
        if schema.type != "struct":
            raise DataError(f"Only Struct objects supported for [field extraction], found: "
                            f"{schema.type}")
        sub = field_schema(schema, name)
        return sub, None if value is None else value.get(name)


class HoistField(KeyOrValue):
    """Wrap the key or value in a struct (or map) with one field ``field``."""

    CONFIG_DEF = ConfigDef([
        ConfigKey("field", "STRING", importance="MEDIUM",
                  documentation="Field name for the single field in the resulting struct.",
                  validator=_non_empty),
    ])

    def transform(self, schema: Schema | None, value: Any, record: ConnectRecord
                  ) -> tuple[Schema | None, Any]:
        name = self.config["field"]
        if schema is None:
            return None, {name: value}
        return struct_schema([(name, schema)]), {name: value}


def _masked(field_type: str | None, value: Any, replacement: str | None) -> Any:
    """Kafka's null-equivalent of the field's type, or ``replacement`` converted to it."""
    kind = field_type or _kind_of(value)
    if replacement is not None:
        try:
            if kind in ("int8", "int16", "int32", "int64"):
                return int(replacement)
            if kind in ("float", "double"):
                return float(replacement)
            if kind == "decimal":
                return Decimal(replacement)
            if kind == "string":
                return replacement
        except ValueError:
            raise DataError(f"Unable to convert {replacement} to {kind}") from None
        raise DataError(f"Cannot mask value of type {kind} with custom replacement.")
    return {"int8": 0, "int16": 0, "int32": 0, "int64": 0, "float": 0.0, "double": 0.0,
            "boolean": False, "string": "", "bytes": b"", "array": [], "map": {},
            "decimal": Decimal(0)}.get(kind)


def _kind_of(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "int64"
    if isinstance(value, float):
        return "double"
    if isinstance(value, Decimal):
        return "decimal"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bytes):
        return "bytes"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "map"
    raise DataError(f"Cannot mask value of type: {type(value).__name__}")


class MaskField(KeyOrValue):
    """Replace the listed fields with their type's null-equivalent or ``replacement``."""

    CONFIG_DEF = ConfigDef([
        ConfigKey("fields", "LIST", importance="HIGH", documentation="Names of fields to mask.",
                  validator=_non_empty),
        ConfigKey("replacement", "STRING", None, "LOW", "Custom value replacement."),
    ])

    def transform(self, schema: Schema | None, value: Any, record: ConnectRecord
                  ) -> tuple[Schema | None, Any]:
        if value is None:
            return schema, value
        replacement = self.config.get("replacement")
        fields = self.config["fields"]
        if schema is None:
            out = dict(require_map(value, "mask fields"))
            for name in fields:
                if out.get(name) is not None:
                    out[name] = _masked(None, out[name], replacement)
            return None, out
        require_struct(schema, value, "mask fields")
        out = dict(value)
        for name in fields:
            sub = field_schema(schema, name)
            out[name] = _masked(sub.type, value.get(name), replacement)
        return schema, out


class ValueToKey(Transformation):
    """Make the key a struct (or map) of the listed value fields."""

    CONFIG_DEF = ConfigDef([
        ConfigKey("fields", "LIST", importance="HIGH",
                  documentation="Field names on the record value to extract as the key.",
                  validator=_non_empty),
    ])

    def apply(self, record: R) -> R | None:
        names = self.config["fields"]
        schema, value = record.value_schema, record.value
        if value is None:
            return record
        if schema is None:
            src = require_map(value, "copying fields from value to key")
            return updated(record, True, None, {n: src.get(n) for n in names})
        require_struct(schema, value, "copying fields from value to key")
        fields = []
        for n in names:
            try:
                fields.append((n, field_schema(schema, n)))
            except DataError:
                raise DataError(f"Field does not exist: {n}") from None
        return updated(record, True, struct_schema(fields), {n: value.get(n) for n in names})


InsertFieldKey, InsertFieldValue = variants(InsertField)
ReplaceFieldKey, ReplaceFieldValue = variants(ReplaceField)
ExtractFieldKey, ExtractFieldValue = variants(ExtractField)
HoistFieldKey, HoistFieldValue = variants(HoistField)
MaskFieldKey, MaskFieldValue = variants(MaskField)
