"""One error response for any request: Kafka's ``AbstractRequest.getErrorResponse``, generically.

When a request cannot be served (a field the schema forbids to be null was null, or the handler
failed), the broker still answers it, so the client sees an error code for each thing it asked
about instead of a closed connection. Kafka writes one ``getErrorResponse`` per API; strom
derives it from the ``kio`` schemas:

- every ``error_code`` field gets the error, every nullable ``error_message`` the message;
- each response array of structs mirrors the request array it answers (same field name, or
  the only array on both sides, or a known alias such as Fetch ``topics`` -> ``responses``),
  element by element, copying the keys the client matches on (topic name / id, partition
  index, group id) so it can attribute the error;
- everything else takes Kafka's "unknown" value: -1 for offsets, epochs, timestamps, ids and
  ports, 0 for other numbers, empty for strings / arrays / bytes, null where nullable.

Pure and sans-IO: entities in, entity out.
"""

from __future__ import annotations

import datetime
import uuid
from dataclasses import MISSING, fields
from typing import Any

from kio.schema.errors import ErrorCode

from strom.protocol.kio_fields import field_shape

__all__ = ["error_response"]

# response array field -> request array fields it may answer, where the names differ and
# neither side has a single array to pair.
_ALIASES: dict[str, tuple[str, ...]] = {
    "responses": ("topics", "topic_data"),
    "partition_responses": ("partition_data", "partitions"),
    "results": ("groups_names", "topics", "topic_names", "resources"),
}
# response key field -> request fields (or a plain request element) it is copied from.
_KEYS: dict[str, tuple[str, ...]] = {
    "name": ("name", "topic", "topic_name"),
    "topic_name": ("topic_name", "name", "topic"),
    "partition_index": ("partition_index", "partition", "index"),
    "index": ("index", "partition_index", "partition"),
    "group_id": ("group_id", "group"),
}
_MINUS_ONE_WORDS = ("offset", "epoch", "timestamp", "producer_id", "generation", "port")
_MINUS_ONE_NAMES = {"leader_id", "node_id", "coordinator_id", "controller_id", "broker_id"}
_EPOCH_ZERO = datetime.datetime.fromtimestamp(0, tz=datetime.UTC)


def error_response(cls: type[Any], request: Any, error: ErrorCode, message: str | None) -> Any:
    """The ``cls`` response answering ``request`` (or ``None``) with ``error`` everywhere."""
    return _build(cls, request, error, message)


def _build(cls: Any, source: Any, error: ErrorCode, message: str | None) -> Any:
    values: dict[str, Any] = {}
    resp_fields = fields(cls)
    source_arrays = _arrays_of(source)
    shapes = [(f, field_shape(f)) for f in resp_fields]
    entity_arrays = [f for f, shape in shapes if shape.array and shape.entity is not None]
    for f, (array, entity, nullable) in shapes:
        kafka_type = f.metadata.get("kafka_type", "")
        if kafka_type == "error_code" and not array:
            values[f.name] = error
            continue
        if f.name == "error_message" and nullable:
            values[f.name] = message
            continue
        if array and entity is not None:
            items = _counterpart(f.name, source, source_arrays, len(entity_arrays) == 1)
            values[f.name] = tuple(_build(entity, item, error, message) for item in items)
            continue
        if f.default is not MISSING or f.default_factory is not MISSING:
            continue  # tagged and defaulted fields keep kio's default
        if array:
            values[f.name] = ()
        elif entity is not None:
            values[f.name] = None if nullable else _build(entity, None, error, message)
        else:
            values[f.name] = _key_value(f, source)
    return cls(**values)


def _arrays_of(source: Any) -> dict[str, tuple[Any, ...]]:
    """The request's array fields (null arrays read as empty)."""
    if source is None or not hasattr(source, "__dataclass_fields__"):
        return {}
    arrays: dict[str, tuple[Any, ...]] = {}
    for f in fields(source):
        if field_shape(f).array:
            value = getattr(source, f.name)
            arrays[f.name] = tuple(value) if value is not None else ()
    return arrays


def _counterpart(
    name: str, source: Any, arrays: dict[str, tuple[Any, ...]], only_array: bool
) -> tuple[Any, ...]:
    if name in arrays:
        return arrays[name]
    for alias in _ALIASES.get(name, ()):
        if alias in arrays:
            return arrays[alias]
    candidates = [items for key, items in arrays.items() if key != "forgotten_topics_data"]
    if only_array and len(candidates) == 1:
        return candidates[0]
    return ()


def _key_value(f: Any, source: Any) -> Any:
    """A primitive response field: copied from the request element where it is a key."""
    if source is not None:
        if not hasattr(source, "__dataclass_fields__"):  # a plain element: name or index
            if f.metadata.get("kafka_type") == "string" and isinstance(source, str):
                if f.name in _KEYS or f.name.endswith("_id") or f.name.endswith("name"):
                    return source
            elif isinstance(source, int) and f.name in ("partition_index", "index"):
                return source
        else:
            for candidate in (f.name, *_KEYS.get(f.name, ())):
                value = getattr(source, candidate, None)
                if value is not None and _same_kind(f, value):
                    return value
    return _unknown(f)


def _same_kind(f: Any, value: Any) -> bool:
    kafka_type = f.metadata.get("kafka_type", "")
    if kafka_type == "string":
        return isinstance(value, str)
    if kafka_type == "uuid":
        return isinstance(value, uuid.UUID)
    if kafka_type.startswith(("int", "uint")):
        return isinstance(value, int) and not isinstance(value, bool)
    return False


def _unknown(f: Any) -> Any:
    """Kafka's "no value" for a field the error response does not otherwise set."""
    kafka_type = f.metadata.get("kafka_type", "")
    nullable = field_shape(f).nullable
    if kafka_type in ("string", "bytes", "records"):
        if nullable:
            return None
        return "" if kafka_type == "string" else b""
    if kafka_type == "bool":
        return False
    if kafka_type == "uuid":
        return None if nullable else uuid.UUID(int=0)
    if kafka_type == "float64":
        return 0.0
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return datetime.timedelta(0)
    if kafka_type == "datetime_i64":
        return None if nullable else _EPOCH_ZERO
    if kafka_type.startswith(("int", "uint")):
        name = f.name
        signed = kafka_type.startswith("int")
        if signed and (name in _MINUS_ONE_NAMES or any(w in name for w in _MINUS_ONE_WORDS)):
            return -1
        return 0
    return None
