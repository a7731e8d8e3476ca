"""Random, valid ``kio`` entities of any message class: seeds for protocol tests and fuzzing.

``sample(cls, rng)`` fills every field with a value of its Kafka type (arrays of 0–2 items,
nulls where the schema allows them, tagged fields sometimes set so they are encoded), so
``encode_request`` of the result is a frame a correct broker must accept as well-formed.
"""

from __future__ import annotations

import datetime
import random
import uuid
from dataclasses import fields
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
