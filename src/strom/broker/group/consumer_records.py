"""KIP-848 consumer groups' records in ``__consumer_offsets`` (Kafka 4's formats).

A key is ``int16 record type`` then Kafka's non-flexible key fields (strings int16-length
UTF-8); a value is ``int16 version (0)`` then its flexible v0 body (compact strings and arrays,
tagged fields), encoded by ``kio``'s serializer from the dataclasses below. A null value is a
tombstone: the key's state is gone.

===========  =====================================  ==========================================
type         key (after the type)                   value v0
===========  =====================================  ==========================================
3            GroupId                                ``ConsumerGroupMetadata``: Epoch int32;
                                                    tagged 0 MetadataHash int64 (4.1+)
4            GroupId                                ``ConsumerGroupPartitionMetadata`` (before
                                                    4.1): read and ignored, tombstoned on
                                                    deletion
5            GroupId, MemberId                      ``ConsumerGroupMemberMetadata``:
                                                    InstanceId, RackId (nullable), ClientId,
                                                    ClientHost, SubscribedTopicNames [string],
                                                    SubscribedTopicRegex (nullable),
                                                    RebalanceTimeoutMs int32, ServerAssignor
                                                    (nullable); tagged 0 ClassicMemberMetadata
                                                    {SessionTimeoutMs int32, SupportedProtocols
                                                    [Name string, Metadata bytes]} for a member
                                                    on the classic protocol
6            GroupId                                ``ConsumerGroupTargetAssignmentMetadata``:
                                                    AssignmentEpoch int32
7            GroupId, MemberId                      ``ConsumerGroupTargetAssignmentMember``:
                                                    TopicPartitions [TopicId uuid, Partitions
                                                    [int32]]
8            GroupId, MemberId                      ``ConsumerGroupCurrentMemberAssignment``:
                                                    MemberEpoch, PreviousMemberEpoch int32,
                                                    State int8 (0 stable, 1 unrevoked
                                                    partitions, 2 unreleased partitions),
                                                    AssignedPartitions,
                                                    PartitionsPendingRevocation [TopicId,
                                                    Partitions]
16           GroupId, RegularExpression             ``ConsumerGroupRegularExpression``: Topics
                                                    [string], Version int64, Timestamp int64
===========  =====================================  ==========================================

The group record (3) says the group exists; deleting a group tombstones every key above.
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

GROUP_METADATA = 3
PARTITION_METADATA = 4
MEMBER_METADATA = 5
TARGET_ASSIGNMENT_METADATA = 6
TARGET_ASSIGNMENT_MEMBER = 7
CURRENT_MEMBER_ASSIGNMENT = 8
REGULAR_EXPRESSION = 16
#: every consumer-group record type of __consumer_offsets
CONSUMER_RECORD_TYPES = frozenset({3, 4, 5, 6, 7, 8, 16})
_I16 = struct.Struct(">h")

#: topic id -> partitions (a member's assignment, as the records and the heartbeat carry it)
TopicPartitions = dict[uuid.UUID, frozenset[int]]


# keys ----------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class _GroupKey:
    __type__: ClassVar = EntityType.data
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    group_id: str = field(metadata={"kafka_type": "string"})


@dataclass(frozen=True, slots=True, kw_only=True)
class _MemberKey:
    __type__: ClassVar = EntityType.data
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    group_id: str = field(metadata={"kafka_type": "string"})
    member_id: str = field(metadata={"kafka_type": "string"})


@dataclass(frozen=True, slots=True, kw_only=True)
class _RegexKey:
    __type__: ClassVar = EntityType.data
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    group_id: str = field(metadata={"kafka_type": "string"})
    regular_expression: str = field(metadata={"kafka_type": "string"})


@dataclass(frozen=True, slots=True)
class ConsumerKey:
    """A decoded key: its record type, group, and the member id or regex (None for the
    group-level types 3, 4, 6)."""

    kind: int
    group: str
    sub: str | None = None


# values --------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class _MetadataValue:
    __type__: ClassVar = EntityType.data
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    epoch: i32 = field(metadata={"kafka_type": "int32"})
    metadata_hash: i64 = field(metadata={"kafka_type": "int64", "tag": 0}, default=i64(0))


@dataclass(frozen=True, slots=True, kw_only=True)
class _ClassicProtocol:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    name: str = field(metadata={"kafka_type": "string"})
    metadata: bytes = field(metadata={"kafka_type": "bytes"})


@dataclass(frozen=True, slots=True, kw_only=True)
class _ClassicMemberMetadata:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    session_timeout_ms: i32 = field(metadata={"kafka_type": "int32"})
    supported_protocols: tuple[_ClassicProtocol, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class _MemberValue:
    __type__: ClassVar = EntityType.data
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    instance_id: str | None = field(metadata={"kafka_type": "string"})
    rack_id: str | None = field(metadata={"kafka_type": "string"})
    client_id: str = field(metadata={"kafka_type": "string"})
    client_host: str = field(metadata={"kafka_type": "string"})
    subscribed_topic_names: tuple[str, ...] = field(metadata={"kafka_type": "string"})
    subscribed_topic_regex: str | None = field(metadata={"kafka_type": "string"})
    rebalance_timeout_ms: i32 = field(metadata={"kafka_type": "int32"})
    server_assignor: str | None = field(metadata={"kafka_type": "string"})
    # typed without None: kio's reader reads a tagged struct only so (None is the default,
    # left out when writing)
    classic_member_metadata: _ClassicMemberMetadata = field(metadata={"tag": 0},
                                                            default=None)  # type: ignore[assignment]


@dataclass(frozen=True, slots=True, kw_only=True)
class _TargetMetadataValue:
    __type__: ClassVar = EntityType.data
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    assignment_epoch: i32 = field(metadata={"kafka_type": "int32"})


@dataclass(frozen=True, slots=True, kw_only=True)
class _TopicPartitions:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    topic_id: uuid.UUID = field(metadata={"kafka_type": "uuid"})
    partitions: tuple[i32, ...] = field(metadata={"kafka_type": "int32"})


@dataclass(frozen=True, slots=True, kw_only=True)
class _TargetMemberValue:
    __type__: ClassVar = EntityType.data
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    topic_partitions: tuple[_TopicPartitions, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class _CurrentAssignmentValue:
    __type__: ClassVar = EntityType.data
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    member_epoch: i32 = field(metadata={"kafka_type": "int32"})
    previous_member_epoch: i32 = field(metadata={"kafka_type": "int32"})
    state: i8 = field(metadata={"kafka_type": "int8"})
    assigned_partitions: tuple[_TopicPartitions, ...]
    partitions_pending_revocation: tuple[_TopicPartitions, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class _RegexValue:
    __type__: ClassVar = EntityType.data
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    topics: tuple[str, ...] = field(metadata={"kafka_type": "string"})
    version: i64 = field(metadata={"kafka_type": "int64"})
    timestamp: i64 = field(metadata={"kafka_type": "int64"})


# the values as the coordinator uses them ---------------------------------------------------
@dataclass(frozen=True, slots=True)
class ClassicMetadata:
    """A member on the classic protocol inside a consumer group: its session timeout and the
    (name, ConsumerProtocolSubscription) protocols its JoinGroup listed."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic: ClassicMetadata | None = None


@dataclass(frozen=True, slots=True)
class CurrentAssignment:
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: TopicPartitions
    pending_revocation: TopicPartitions


@dataclass(frozen=True, slots=True)
class ResolvedRegex:
    """The topics a subscribed regex matched, and the topic registry's version then."""

    topics: frozenset[str]
    version: int
    timestamp: int


# encoding ------------------------------------------------------------------------------------
def _encode(entity: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


def _value(entity: Any) -> bytes:
    return _I16.pack(0) + _encode(entity)


def _tps(parts: TopicPartitions) -> tuple[_TopicPartitions, ...]:
    return tuple(_TopicPartitions(topic_id=tid, partitions=tuple(i32(p) for p in sorted(ps)))
                 for tid, ps in sorted(parts.items()) if ps)  # fmt: skip


def group_key(kind: int, group: str) -> bytes:
    return _I16.pack(kind) + _encode(_GroupKey(group_id=group))


def member_key(kind: int, group: str, member: str) -> bytes:
    return _I16.pack(kind) + _encode(_MemberKey(group_id=group, member_id=member))


def regex_key(group: str, regex: str) -> bytes:
    return _I16.pack(REGULAR_EXPRESSION) + _encode(_RegexKey(group_id=group,
                                                             regular_expression=regex))


def group_epoch_value(epoch: int, metadata_hash: int = 0) -> bytes:
    return _value(_MetadataValue(epoch=i32(epoch), metadata_hash=i64(metadata_hash)))


def member_value(m: MemberMetadata) -> bytes:
    classic = None
    if m.classic is not None:
        classic = _ClassicMemberMetadata(
            session_timeout_ms=i32(m.classic.session_timeout_ms),
            supported_protocols=tuple(_ClassicProtocol(name=n, metadata=md)
                                      for n, md in m.classic.protocols))  # fmt: skip
    return _value(_MemberValue(
        instance_id=m.instance_id, rack_id=m.rack_id, client_id=m.client_id,
        client_host=m.client_host, subscribed_topic_names=tuple(m.subscribed_topic_names),
        subscribed_topic_regex=m.subscribed_topic_regex,
        rebalance_timeout_ms=i32(m.rebalance_timeout_ms), server_assignor=m.server_assignor,
        classic_member_metadata=classic))  # type: ignore[arg-type]  # fmt: skip


def target_epoch_value(epoch: int) -> bytes:
    return _value(_TargetMetadataValue(assignment_epoch=i32(epoch)))


def target_member_value(parts: TopicPartitions) -> bytes:
    return _value(_TargetMemberValue(topic_partitions=_tps(parts)))


def current_assignment_value(a: CurrentAssignment) -> bytes:
    return _value(_CurrentAssignmentValue(
        member_epoch=i32(a.member_epoch), previous_member_epoch=i32(a.previous_member_epoch),
        state=i8(a.state), assigned_partitions=_tps(a.assigned),
        partitions_pending_revocation=_tps(a.pending_revocation)))  # fmt: skip


def regex_value(r: ResolvedRegex) -> bytes:
    return _value(_RegexValue(topics=tuple(sorted(r.topics)), version=i64(r.version),
                              timestamp=i64(r.timestamp)))  # fmt: skip


# decoding ------------------------------------------------------------------------------------
def record_type(key: bytes) -> int:
    """The record type (the key's leading int16) of a ``__consumer_offsets`` key."""
    if len(key) < 2:
        raise RecordFormatError("__consumer_offsets key shorter than its type")
    return int(_I16.unpack_from(key, 0)[0])


def _read(cls: Any, data: bytes, what: str) -> Any:
    try:
        decoded, _used = entity_reader(cls)(data, 2)
    except Exception as exc:
        raise RecordFormatError(f"bad {what}: {exc}") from None
    return decoded


def decode_key(key: bytes) -> ConsumerKey:
    kind = record_type(key)
    if kind in (GROUP_METADATA, PARTITION_METADATA, TARGET_ASSIGNMENT_METADATA):
        return ConsumerKey(kind, str(_read(_GroupKey, key, "consumer group key").group_id))
    if kind in (MEMBER_METADATA, TARGET_ASSIGNMENT_MEMBER, CURRENT_MEMBER_ASSIGNMENT):
        k = _read(_MemberKey, key, "consumer group member key")
        return ConsumerKey(kind, str(k.group_id), str(k.member_id))
    if kind == REGULAR_EXPRESSION:
        k = _read(_RegexKey, key, "consumer group regex key")
        return ConsumerKey(kind, str(k.group_id), str(k.regular_expression))
    raise RecordFormatError(f"not a consumer group record type: {kind}")


def _body(cls: Any, value: bytes) -> Any:
    if len(value) < 2 or _I16.unpack_from(value, 0)[0] != 0:
        raise RecordFormatError(f"unsupported {cls.__name__.strip('_')} version")
    return _read(cls, value, cls.__name__.strip("_"))


def _parts(tps: Any) -> TopicPartitions:
    out: TopicPartitions = {}
    for tp in tps:
        out[tp.topic_id] = out.get(tp.topic_id, frozenset()) | frozenset(int(p) for p in tp.partitions)
    return out


def decode_group_epoch(value: bytes) -> tuple[int, int]:
    """(group epoch, metadata hash)."""
    v = _body(_MetadataValue, value)
    return int(v.epoch), int(v.metadata_hash)


def decode_member(value: bytes) -> MemberMetadata:
    v = _body(_MemberValue, value)
    classic = None
    if v.classic_member_metadata is not None:
        c = v.classic_member_metadata
        classic = ClassicMetadata(int(c.session_timeout_ms),
                                  tuple((str(p.name), bytes(p.metadata)) for p in c.supported_protocols))  # fmt: skip
    return MemberMetadata(v.instance_id, v.rack_id, str(v.client_id), str(v.client_host),
                          tuple(str(t) for t in v.subscribed_topic_names),
                          v.subscribed_topic_regex, int(v.rebalance_timeout_ms),
                          v.server_assignor, classic)  # fmt: skip


def decode_target_epoch(value: bytes) -> int:
    return int(_body(_TargetMetadataValue, value).assignment_epoch)


def decode_target_member(value: bytes) -> TopicPartitions:
    return _parts(_body(_TargetMemberValue, value).topic_partitions)


def decode_current_assignment(value: bytes) -> CurrentAssignment:
    v = _body(_CurrentAssignmentValue, value)
    return CurrentAssignment(int(v.member_epoch), int(v.previous_member_epoch), int(v.state),
                             _parts(v.assigned_partitions),
                             _parts(v.partitions_pending_revocation))  # fmt: skip


def decode_regex(value: bytes) -> ResolvedRegex:
    v = _body(_RegexValue, value)
    return ResolvedRegex(frozenset(str(t) for t in v.topics), int(v.version), int(v.timestamp))
