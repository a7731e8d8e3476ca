"""The transformation API (Kafka's ``Transformation``) and helpers for Connect data.

A transformation is configured once with its own keys (the ``transforms.<alias>.`` prefix
stripped) and then maps one record to a new record, or to None to drop it. Records are the
runtime's :class:`~strom.connect.api.ConnectRecord` s; a transform never changes the record it
is given (it returns a copy).

Connect data as the converters represent it: a value with a struct schema is a ``dict`` in the
schema's field order; schemaless (``schemas.enable=false``) objects are ``dict`` s too, which
Kafka calls maps. Logical types keep their JSON representation: ``Timestamp`` and ``Time`` are
milliseconds (int), ``Date`` is days since the epoch (int).

``$Key`` / ``$Value`` variants are one class with ``is_key`` set (:class:`KeyOrValue`).
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from typing import Any, ClassVar, TypeVar

from strom.connect.api import ConnectRecord
from strom.connect.config import ConfigDef
from strom.connect.converters import DataError, Schema

R = TypeVar("R", bound=ConnectRecord)

TIMESTAMP = "org.apache.kafka.connect.data.Timestamp"
DATE = "org.apache.kafka.connect.data.Date"
TIME = "org.apache.kafka.connect.data.Time"
TIMESTAMP_SCHEMA = Schema("int64", name=TIMESTAMP)
OPTIONAL_TIMESTAMP_SCHEMA = Schema("int64", optional=True, name=TIMESTAMP)


class Transformation(ABC):
    """One single-message transform; subclasses set ``CONFIG_DEF`` and implement apply."""

    CONFIG_DEF: ClassVar[ConfigDef] = ConfigDef()

    def __init__(self) -> None:
        self.config: dict[str, Any] = {}

    @classmethod
    def config_def(cls) -> ConfigDef:
        return cls.CONFIG_DEF

    def configure(self, props: dict[str, str]) -> None:
        """Parse the transform's own keys; ValueError (Kafka's message) if invalid."""
        self.config = self.config_def().parse(props)
        self.validate_config()

    def validate_config(self) -> None:  # noqa: B027 - optional hook
        """Cross-key checks after parsing; raise ValueError."""

    @abstractmethod
    def apply(self, record: R) -> R | None:
        """The transformed copy of ``record``, or None to drop it."""

    def close(self) -> None:  # noqa: B027 - optional hook
        pass


class KeyOrValue(Transformation):
    """A transform of the key (``$Key``) or the value (``$Value``) with its schema."""

    is_key: ClassVar[bool] = False

    def apply(self, record: R) -> R | None:
        schema = record.key_schema if self.is_key else record.value_schema
        value = record.key if self.is_key else record.value
        new_schema, new_value = self.transform(schema, value, record)
        return updated(record, self.is_key, new_schema, new_value)

    @abstractmethod
    def transform(self, schema: Schema | None, value: Any, record: ConnectRecord
                  ) -> tuple[Schema | None, Any]:
        """(schema, value) of the key or value after the transform."""


def updated(record: R, is_key: bool, schema: Schema | None, value: Any) -> R:
    if is_key:
        return dataclasses.replace(record, key_schema=schema, key=value)
    return dataclasses.replace(record, value_schema=schema, value=value)


def variants(base: type[KeyOrValue]) -> tuple[type[KeyOrValue], type[KeyOrValue]]:
    """The ``$Key`` and ``$Value`` subclasses of ``base`` (named as Kafka's nested classes)."""
    key = type(f"{base.__name__}$Key", (base,), {"is_key": True, "__module__": base.__module__})
    value = type(f"{base.__name__}$Value", (base,),
                 {"is_key": False, "__module__": base.__module__})
    return key, value


def require_map(value: Any, purpose: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise DataError(f"Only Map objects supported in absence of schema for [{purpose}], "
                        f"found: {_type_name(value)}")
    return value


def require_struct(schema: Schema | None, value: Any, purpose: str) -> dict[str, Any]:
    if schema is None or schema.type != "struct" or not isinstance(value, dict):
        raise DataError(f"Only Struct objects supported for [{purpose}], found: "
                        f"{_type_name(value)}")
    return value


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def struct_schema(fields: list[tuple[str, Schema]], like: Schema | None = None,
                  optional: bool | None = None) -> Schema:
    """A struct schema with ``fields``, keeping name/optional of ``like`` when given."""
    return Schema("struct", optional=like.optional if optional is None and like else
                  bool(optional), name=like.name if like else None, fields=tuple(fields))


def field_schema(schema: Schema, name: str) -> Schema:
    for field_name, sub in schema.fields:
        if field_name == name:
            return sub
    raise DataError(f"{name} is not a valid field name")


def as_optional(schema: Schema) -> Schema:
    return dataclasses.replace(schema, optional=True)


def infer_schema(value: Any) -> Schema:
    """A schema for a schemaless primitive (used when a transform must build a struct)."""
    if isinstance(value, bool):
        return Schema("boolean", optional=True)
    if isinstance(value, int):
        return Schema("int64", optional=True)
    if isinstance(value, float):
        return Schema("double", optional=True)
    if isinstance(value, bytes):
        return Schema("bytes", optional=True)
    return Schema("string", optional=True)
