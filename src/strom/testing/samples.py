"""Random, valid ``kio`` entities of any message class: seeds for protocol tests and fuzzing.

``sample(cls, rng)`` fills every field with a value of its Kafka type (arrays of 0–2 items,
nulls where the schema allows them, tagged fields sometimes set so they are encoded), so
``encode_request`` of the result is a frame a correct broker must accept as well-formed.
``minimal(cls)`` is the smallest well-formed one: the schema's defaults, empty arrays (never a
null array: for some APIs null means "all"), nulls where allowed, zeros and empty strings.
"""

from __future__ import annotations

import datetime
import random
import uuid
from dataclasses import MISSING, fields
from typing import Any

from strom.protocol.kio_fields import field_shape

_INT_BITS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}
_UINT_BITS = {"uint8": 8, "uint16": 16, "uint32": 32, "uint64": 64}


def sample(cls: Any, rng: random.Random, max_wait_ms: int = 60_000) -> Any:
    """A random ``cls``; durations (timeouts, waits) are at most ``max_wait_ms``."""
    values: dict[str, Any] = {}
    for f in fields(cls):
        if "tag" in f.metadata and rng.random() < 0.5:
            continue  # keep kio's default: the tagged field is left out of the encoding
        values[f.name] = _field_value(f, rng, max_wait_ms)
    return cls(**values)


def minimal(cls: Any, **overrides: Any) -> Any:
    """The smallest well-formed ``cls`` (see the module docstring); ``overrides`` set
    top-level fields."""
    values: dict[str, Any] = {}
    for f in fields(cls):
        if f.name in overrides:
            values[f.name] = overrides[f.name]
            continue
        if f.default is not MISSING or f.default_factory is not MISSING:
            continue  # the schema's default
        array, entity, nullable = field_shape(f)
        if array:
            values[f.name] = ()
        elif nullable:
            values[f.name] = None
        elif entity is not None:
            values[f.name] = minimal(entity)
        else:
            values[f.name] = _zero(f.metadata["kafka_type"])
    return cls(**values)


def _zero(kafka_type: str) -> Any:
    if kafka_type in _INT_BITS or kafka_type in _UINT_BITS:
        return 0
    if kafka_type == "string":
        return ""
    if kafka_type in ("bytes", "records"):
        return b""
    if kafka_type == "bool":
        return False
    if kafka_type == "float64":
        return 0.0
    if kafka_type == "uuid":
        return uuid.UUID(int=0)
    if kafka_type == "error_code":
        from kio.schema.errors import ErrorCode

        return ErrorCode.none
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return datetime.timedelta(0)
    if kafka_type == "datetime_i64":
        return datetime.datetime.fromtimestamp(0, tz=datetime.UTC)
    raise TypeError(f"no zero for kafka type {kafka_type!r}")


def _field_value(f: Any, rng: random.Random, max_wait_ms: int) -> Any:
    array, entity, nullable = field_shape(f)
    if nullable and rng.random() < 0.2:
        return None
    if array and entity is not None:
        return tuple(sample(entity, rng, max_wait_ms) for _ in range(rng.randint(0, 2)))
    if array:
        kafka_type = f.metadata["kafka_type"]
        return tuple(_primitive(kafka_type, rng, max_wait_ms) for _ in range(rng.randint(0, 2)))
    if entity is not None:
        return sample(entity, rng, max_wait_ms)
    return _primitive(f.metadata["kafka_type"], rng, max_wait_ms)


def _primitive(kafka_type: str, rng: random.Random, max_wait_ms: int = 60_000) -> Any:
    if kafka_type in _INT_BITS:
        bits = _INT_BITS[kafka_type]
        return rng.choice([0, 1, -1, rng.randint(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)])
    if kafka_type in _UINT_BITS:
        return rng.randint(0, 2 ** _UINT_BITS[kafka_type] - 1)
    if kafka_type == "string":
        return rng.choice(["", "t", "topic-a", "é" * rng.randint(0, 3)])
    if kafka_type in ("bytes", "records"):
        return rng.randbytes(rng.randint(0, 8))
    if kafka_type == "bool":
        return rng.random() < 0.5
    if kafka_type == "float64":
        return rng.random()
    if kafka_type == "uuid":
        return uuid.UUID(int=rng.getrandbits(128))
    if kafka_type == "error_code":
        from kio.schema.errors import ErrorCode

        return ErrorCode.none
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return datetime.timedelta(milliseconds=rng.randint(0, max_wait_ms))
    if kafka_type == "datetime_i64":
        return datetime.datetime.fromtimestamp(rng.randint(0, 2_000_000_000), tz=datetime.UTC)
    raise TypeError(f"no sample for kafka type {kafka_type!r}")
