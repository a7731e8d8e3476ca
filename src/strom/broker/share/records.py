"""Kafka's record formats in ``__share_group_state`` (the share coordinator's log).

Two record types share one key layout, told apart by the key's leading int16, which is the
record type (Kafka's ``CoordinatorRecordType``: 0 ShareSnapshot, 1 ShareUpdate). Keys are
non-flexible: ``int16 type | GroupId string (int16 length) | TopicId uuid (16 bytes) |
Partition int32``. Values are ``int16 version (0)`` then the flexible v0 body (compact
arrays, tagged fields):

- ``ShareSnapshotValue``: ``SnapshotEpoch int32, StateEpoch int32, LeaderEpoch int32,
  StartOffset int64, CreateTimestamp int64, WriteTimestamp int64, StateBatches [FirstOffset
  int64, LastOffset int64, DeliveryState int8, DeliveryCount int16]``, tagged field 0
  ``DeliveryCompleteCount int32`` (KIP-1226; -1, left out, when unknown);
- ``ShareUpdateValue``: ``SnapshotEpoch int32, LeaderEpoch int32, StartOffset int64,
  StateBatches [...]``, tagged field 0 ``DeliveryCompleteCount``.

A snapshot is a share-partition's whole state; an update is a delta combined into the state
before it (:func:`strom.broker.share.state.combine`). Delivery states in batches are 0
Available, 2 Acknowledged, 4 Archived. A null value (tombstone) deletes the key: both keys of a
share-partition are tombstoned when its state is deleted.

Schemas as in Kafka 4.2's ``share-coordinator`` module (``SnapshotEpoch`` int32 since 4.1,
``CreateTimestamp``/``WriteTimestamp`` since 4.1, ``DeliveryCompleteCount`` since 4.2); the
bodies are encoded by ``kio``'s serializer from the dataclasses below.
"""

# No ``from __future__ import annotations``: kio reads the dataclasses' field types at run time.
import io
import struct
import uuid
from dataclasses import dataclass, field
from typing import Any, ClassVar

from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType
from kio.static.primitive import i8, i16, i32, i64

from strom.broker.group.records import RecordFormatError

SHARE_SNAPSHOT = 0
SHARE_UPDATE = 1
VALUE_VERSION = 0
_I16 = struct.Struct(">h")


@dataclass(frozen=True, slots=True, kw_only=True)
class StateBatch:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    first_offset: i64 = field(metadata={"kafka_type": "int64"})
    last_offset: i64 = field(metadata={"kafka_type": "int64"})
    delivery_state: i8 = field(metadata={"kafka_type": "int8"})
    delivery_count: i16 = field(metadata={"kafka_type": "int16"})


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareStateKey:
    __type__: ClassVar = EntityType.data
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    group_id: str = field(metadata={"kafka_type": "string"})
    topic_id: uuid.UUID = field(metadata={"kafka_type": "uuid"})
    partition: i32 = field(metadata={"kafka_type": "int32"})


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareSnapshotValue:
    __type__: ClassVar = EntityType.data
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    snapshot_epoch: i32 = field(metadata={"kafka_type": "int32"})
    state_epoch: i32 = field(metadata={"kafka_type": "int32"})
    leader_epoch: i32 = field(metadata={"kafka_type": "int32"})
    start_offset: i64 = field(metadata={"kafka_type": "int64"})
    create_timestamp: i64 = field(metadata={"kafka_type": "int64"})
    write_timestamp: i64 = field(metadata={"kafka_type": "int64"})
    state_batches: tuple[StateBatch, ...]
    delivery_complete_count: i32 = field(metadata={"kafka_type": "int32", "tag": 0},
                                         default=i32(-1))  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareUpdateValue:
    __type__: ClassVar = EntityType.data
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    snapshot_epoch: i32 = field(metadata={"kafka_type": "int32"})
    leader_epoch: i32 = field(metadata={"kafka_type": "int32"})
    start_offset: i64 = field(metadata={"kafka_type": "int64"})
    state_batches: tuple[StateBatch, ...]
    delivery_complete_count: i32 = field(metadata={"kafka_type": "int32", "tag": 0},
                                         default=i32(-1))  # fmt: skip


def _encode(entity: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


def _decode(cls: Any, data: bytes, offset: int) -> Any:
    try:
        value, _used = entity_reader(cls)(data, offset)
    except Exception as exc:  # kio raises several types for truncated or garbled input
        raise RecordFormatError(f"bad {cls.__name__}: {exc}") from None
    return value


def batch(first: int, last: int, state: int, count: int) -> StateBatch:
    return StateBatch(first_offset=i64(first), last_offset=i64(last), delivery_state=i8(state),
                      delivery_count=i16(count))  # fmt: skip


def encode_key(record_type: int, group_id: str, topic_id: uuid.UUID, partition: int) -> bytes:
    key = ShareStateKey(group_id=group_id, topic_id=topic_id, partition=i32(partition))
    return _I16.pack(record_type) + _encode(key)


def decode_key(data: bytes) -> tuple[int, ShareStateKey]:
    """(record type, key); RecordFormatError for another record type or a bad key."""
    if len(data) < 2:
        raise RecordFormatError("share state key shorter than its type")
    (record_type,) = _I16.unpack_from(data, 0)
    if record_type not in (SHARE_SNAPSHOT, SHARE_UPDATE):
        raise RecordFormatError(f"unknown __share_group_state record type {record_type}")
    return int(record_type), _decode(ShareStateKey, data, 2)


def encode_value(value: ShareSnapshotValue | ShareUpdateValue) -> bytes:
    return _I16.pack(VALUE_VERSION) + _encode(value)


def decode_value(record_type: int, data: bytes) -> ShareSnapshotValue | ShareUpdateValue:
    if len(data) < 2:
        raise RecordFormatError("share state value shorter than its version")
    (version,) = _I16.unpack_from(data, 0)
    if version != VALUE_VERSION:
        raise RecordFormatError(f"unsupported share state value version {version}")
    cls = ShareSnapshotValue if record_type == SHARE_SNAPSHOT else ShareUpdateValue
    return _decode(cls, data, 2)  # type: ignore[no-any-return]
