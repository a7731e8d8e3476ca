"""Kafka's record formats in ``__consumer_offsets`` (so Kafka's own tools can read strom's).

Keys and values are Kafka's generated non-flexible message formats, prefixed by an int16
version; strings are int16-length UTF-8 (-1 = null), bytes int32-length, arrays int32-count:

- offset commit key, version 1: ``group string, topic string, partition int32``
- offset commit value, version 3: ``offset int64, leader_epoch int32, metadata string,
  commit_timestamp int64`` (versions 0–2 are read too: v1 adds ``expire_timestamp``, v0/v2
  have no leader epoch)
- group metadata key, version 2: ``group string``
- group metadata value, version 3: ``protocol_type string, generation int32, protocol
  nullable string, leader nullable string, current_state_timestamp int64, members [member_id,
  group_instance_id (nullable), client_id, client_host, rebalance_timeout int32,
  session_timeout int32, subscription bytes, assignment bytes]`` (versions 0–2 are read too)

A null value is a tombstone: the offset, or the whole group, was deleted. The partition of a
group is ``abs(java_string_hashcode(group)) % offsets.topic.num.partitions`` as in Kafka.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

OFFSET_KEY_VERSION = 1
OFFSET_VALUE_VERSION = 3
GROUP_KEY_VERSION = 2
GROUP_VALUE_VERSION = 3


class RecordFormatError(ValueError):
    """A record in ``__consumer_offsets`` that is not one of Kafka's known formats."""


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group: str


@dataclass(frozen=True, slots=True)
class OffsetValue:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    expire_timestamp: int = -1


@dataclass(frozen=True, slots=True)
class MemberValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1
    members: tuple[MemberValue, ...] = field(default_factory=tuple)


def java_string_hashcode(s: str) -> int:
    """``String.hashCode()`` of Java: over UTF-16 code units, int32 arithmetic."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(group: str, partitions: int) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode) % partitions`` (abs(MIN_VALUE) is 0)."""
    h = java_string_hashcode(group)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


# writing ----------------------------------------------------------------------------------------
class _Writer:
    def __init__(self) -> None:
        self.buf = bytearray()

    def i16(self, v: int) -> _Writer:
        self.buf += struct.pack(">h", v)
        return self

    def i32(self, v: int) -> _Writer:
        self.buf += struct.pack(">i", v)
        return self

    def i64(self, v: int) -> _Writer:
        self.buf += struct.pack(">q", v)
        return self

    def string(self, v: str | None) -> _Writer:
        if v is None:
            return self.i16(-1)
        data = v.encode("utf-8")
        self.i16(len(data))
        self.buf += data
        return self

    def bytes_(self, v: bytes | None) -> _Writer:
        if v is None:
            return self.i32(-1)
        self.i32(len(v))
        self.buf += v
        return self


def encode_offset_key(key: OffsetKey) -> bytes:
    w = _Writer().i16(OFFSET_KEY_VERSION).string(key.group).string(key.topic).i32(key.partition)
    return bytes(w.buf)


def encode_group_key(key: GroupKey) -> bytes:
    return bytes(_Writer().i16(GROUP_KEY_VERSION).string(key.group).buf)


def encode_offset_value(value: OffsetValue) -> bytes:
    w = _Writer().i16(OFFSET_VALUE_VERSION).i64(value.offset).i32(value.leader_epoch)
    w.string(value.metadata).i64(value.commit_timestamp)
    return bytes(w.buf)


def encode_group_value(value: GroupValue) -> bytes:
    w = _Writer().i16(GROUP_VALUE_VERSION).string(value.protocol_type).i32(value.generation)
    w.string(value.protocol).string(value.leader).i64(value.current_state_timestamp)
    w.i32(len(value.members))
    for m in value.members:
        w.string(m.member_id).string(m.group_instance_id).string(m.client_id)
        w.string(m.client_host).i32(m.rebalance_timeout).i32(m.session_timeout)
        w.bytes_(m.subscription).bytes_(m.assignment)
    return bytes(w.buf)


# reading ----------------------------------------------------------------------------------------
class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _take(self, fmt: str, size: int) -> int:
        if self.pos + size > len(self.data):
            raise RecordFormatError("record ends early")
        (v,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return int(v)

    def i16(self) -> int:
        return self._take(">h", 2)

    def i32(self) -> int:
        return self._take(">i", 4)

    def i64(self) -> int:
        return self._take(">q", 8)

    def string(self) -> str | None:
        n = self.i16()
        if n < 0:
            return None
        return self._raw(n).decode("utf-8")

    def bytes_(self) -> bytes | None:
        n = self.i32()
        if n < 0:
            return None
        return self._raw(n)

    def _raw(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise RecordFormatError("record ends early")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return bytes(out)


def decode_key(data: bytes) -> OffsetKey | GroupKey:
    r = _Reader(data)
    version = r.i16()
    if version in (0, 1):
        return OffsetKey(r.string() or "", r.string() or "", r.i32())
    if version == 2:
        return GroupKey(r.string() or "")
    raise RecordFormatError(f"unknown __consumer_offsets key version {version}")


def decode_offset_value(data: bytes) -> OffsetValue:
    r = _Reader(data)
    version = r.i16()
    if version not in (0, 1, 2, 3):
        raise RecordFormatError(f"unsupported offset commit value version {version}")
    offset = r.i64()
    epoch = r.i32() if version >= 3 else -1
    metadata = r.string() or ""
    commit_ts = r.i64()
    expire_ts = r.i64() if version == 1 else -1
    return OffsetValue(offset, epoch, metadata, commit_ts, expire_ts)


def decode_group_value(data: bytes) -> GroupValue:
    r = _Reader(data)
    version = r.i16()
    if version not in (0, 1, 2, 3):
        raise RecordFormatError(f"unsupported group metadata value version {version}")
    protocol_type = r.string() or ""
    generation = r.i32()
    protocol = r.string()
    leader = r.string()
    state_ts = r.i64() if version >= 2 else -1
    members = []
    for _ in range(r.i32()):
        member_id = r.string() or ""
        instance_id = r.string() if version >= 3 else None
        client_id = r.string() or ""
        client_host = r.string() or ""
        session_timeout_first = version == 0
        rebalance = -1
        if not session_timeout_first:
            rebalance = r.i32()
        session = r.i32()
        if session_timeout_first:
            rebalance = session
        subscription = r.bytes_() or b""
        assignment = r.bytes_() or b""
        members.append(
            MemberValue(
                member_id, instance_id, client_id, client_host, rebalance, session,
                subscription, assignment,
            )
        )  # fmt: skip
    return GroupValue(protocol_type, generation, protocol, leader, state_ts, tuple(members))
