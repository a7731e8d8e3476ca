"""Share groups' records in ``__consumer_offsets`` (Kafka's formats, record types 11 and 15).

Keys are Kafka's non-flexible ``int16 type | GroupId string``; values ``int16 version (0) |``
a flexible v0 body:

- type 11 ``ShareGroupMetadata``: ``Epoch int32, MetadataHash int64`` — the group exists, at
  this group epoch (strom writes hash 0: it compares the subscribed topics themselves);
- type 15 ``ShareGroupStatePartitionMetadata``: ``InitializingTopics [TopicId uuid, TopicName
  string, Partitions [int32]], InitializedTopics [same], DeletingTopics [TopicId uuid,
  TopicName string]`` — the share-partitions whose state exists in ``__share_group_state``
  (what DescribeShareGroupOffsets reports and deleting the group removes).

A tombstone of both removes the group. Kafka also writes member and target-assignment records
(types 10, 12–14); strom keeps share-group members in memory only (a member that finds a new
coordinator rejoins: a share assignment owns nothing that must be revoked first), so it writes
none and skips them when it reads Kafka's. Type 9 (``ShareGroupPartitionMetadata``, Kafka 4.0)
is skipped too.
"""

# No ``from __future__ import annotations``: kio reads the dataclasses' field types at run time.
import io
import struct
import uuid
from dataclasses import dataclass, field
from typing import Any, ClassVar

from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType
from kio.static.primitive import i16, i32, i64

from strom.broker.group.records import RecordFormatError

SHARE_GROUP_METADATA = 11
SHARE_GROUP_STATE_PARTITION_METADATA = 15
#: every share-group record type of __consumer_offsets (9 and 10, 12-14 are skipped on load)
SHARE_RECORD_TYPES = frozenset({9, 10, 11, 12, 13, 14, 15})
_I16 = struct.Struct(">h")


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupKey:
    __type__: ClassVar = EntityType.data
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    group_id: str = field(metadata={"kafka_type": "string"})


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareGroupMetadataValue:
    __type__: ClassVar = EntityType.data
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    epoch: i32 = field(metadata={"kafka_type": "int32"})
    metadata_hash: i64 = field(metadata={"kafka_type": "int64"}, default=i64(0))


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicPartitionsInfo:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    topic_id: uuid.UUID = field(metadata={"kafka_type": "uuid"})
    topic_name: str = field(metadata={"kafka_type": "string"})
    partitions: tuple[i32, ...] = field(metadata={"kafka_type": "int32"}, default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicInfo:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    topic_id: uuid.UUID = field(metadata={"kafka_type": "uuid"})
    topic_name: str = field(metadata={"kafka_type": "string"})


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareGroupStatePartitionMetadataValue:
    __type__: ClassVar = EntityType.data
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    initializing_topics: tuple[TopicPartitionsInfo, ...]
    initialized_topics: tuple[TopicPartitionsInfo, ...]
    deleting_topics: tuple[TopicInfo, ...]


def _encode(entity: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


def record_type(key: bytes) -> int:
    """The record type (the key's leading int16) of a ``__consumer_offsets`` key."""
    if len(key) < 2:
        raise RecordFormatError("__consumer_offsets key shorter than its type")
    return int(_I16.unpack_from(key, 0)[0])


def encode_key(kind: int, group: str) -> bytes:
    return _I16.pack(kind) + _encode(GroupKey(group_id=group))


def decode_group(key: bytes) -> str:
    try:
        value, _used = entity_reader(GroupKey)(key, 2)
    except Exception as exc:
        raise RecordFormatError(f"bad share group key: {exc}") from None
    return str(value.group_id)


def encode_metadata(epoch: int) -> bytes:
    return _I16.pack(0) + _encode(ShareGroupMetadataValue(epoch=i32(epoch)))


def decode_metadata(value: bytes) -> int:
    return int(_decode(ShareGroupMetadataValue, value).epoch)


#: topic id -> (topic name, partitions)
InitializedTopics = dict[uuid.UUID, tuple[str, frozenset[int]]]


def encode_state_partitions(initialized: InitializedTopics) -> bytes:
    topics = tuple(
        TopicPartitionsInfo(topic_id=tid, topic_name=name,
                            partitions=tuple(i32(p) for p in sorted(parts)))
        for tid, (name, parts) in sorted(initialized.items(), key=lambda kv: kv[1][0])
    )  # fmt: skip
    value = ShareGroupStatePartitionMetadataValue(initializing_topics=(), initialized_topics=topics,
                                                  deleting_topics=())  # fmt: skip
    return _I16.pack(0) + _encode(value)


def decode_state_partitions(value: bytes) -> InitializedTopics:
    decoded = _decode(ShareGroupStatePartitionMetadataValue, value)
    return {t.topic_id: (str(t.topic_name), frozenset(int(p) for p in t.partitions))
            for t in decoded.initialized_topics}  # fmt: skip


def _decode(cls: Any, value: bytes) -> Any:
    if len(value) < 2 or _I16.unpack_from(value, 0)[0] != 0:
        raise RecordFormatError(f"unsupported {cls.__name__} version")
    try:
        decoded, _used = entity_reader(cls)(value, 2)
    except Exception as exc:
        raise RecordFormatError(f"bad {cls.__name__}: {exc}") from None
    return decoded
