"""The consumer protocol embedded in the classic group protocol (JoinGroup / SyncGroup bytes).

Kafka's ``ConsumerProtocolSubscription`` and ``ConsumerProtocolAssignment`` (non-flexible,
versions 0–3), which a classic member's JoinGroup metadata and SyncGroup assignment carry. The
coordinator reads them only where it must: to run a classic member inside a KIP-848 consumer
group (its topics, owned partitions and rack), and to convert a group between the two
protocols.

- subscription: ``int16 version, topics [string], user_data nullable bytes``; v1+
  ``owned_partitions [topic string, partitions [int32]]``; v2+ ``generation_id int32``; v3+
  ``rack_id nullable string``;
- assignment: ``int16 version, assigned_partitions [topic string, partitions [int32]],
  user_data nullable bytes`` (the same layout in every version).

Strings are int16-length UTF-8 (-1 null), bytes int32-length (-1 null), arrays int32-count.
A truncated or malformed value raises :class:`EmbeddedProtocolError`.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


class EmbeddedProtocolError(ValueError):
    """Bytes that are not a consumer protocol subscription or assignment."""


@dataclass(frozen=True, slots=True)
class Subscription:
    version: int
    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned: dict[str, tuple[int, ...]] = field(default_factory=dict)
    generation: int = -1
    rack_id: str | None = None


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _unpack(self, fmt: str, size: int) -> int:
        if self.pos + size > len(self.data):
            raise EmbeddedProtocolError("consumer protocol bytes end early")
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return int(value)

    def i16(self) -> int:
        return self._unpack(">h", 2)

    def i32(self) -> int:
        return self._unpack(">i", 4)

    def raw(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise EmbeddedProtocolError("consumer protocol bytes end early")
        out = bytes(self.data[self.pos : self.pos + n])
        self.pos += n
        return out

    def string(self) -> str | None:
        n = self.i16()
        if n < 0:
            return None
        try:
            return self.raw(n).decode("utf-8")
        except UnicodeDecodeError:
            raise EmbeddedProtocolError("consumer protocol string is not UTF-8") from None

    def bytes_(self) -> bytes | None:
        n = self.i32()
        return None if n < 0 else self.raw(n)

    def count(self) -> int:
        n = self.i32()
        if n < -1 or n > len(self.data):
            raise EmbeddedProtocolError(f"bad array length {n}")
        return max(n, 0)

    def topic_partitions(self) -> dict[str, tuple[int, ...]]:
        out: dict[str, tuple[int, ...]] = {}
        for _ in range(self.count()):
            topic = self.string() or ""
            parts = tuple(self.i32() for _ in range(self.count()))
            out[topic] = tuple(sorted(set(out.get(topic, ()) + parts)))
        return out


def version_of(data: bytes) -> int:
    """The leading version of a subscription or assignment (0 for empty bytes)."""
    if len(data) < 2:
        return 0
    return max(0, struct.unpack_from(">h", data, 0)[0])


def parse_subscription(data: bytes) -> Subscription:
    r = _Reader(data)
    version = r.i16()
    if version < 0:
        raise EmbeddedProtocolError(f"bad subscription version {version}")
    topics = tuple(r.string() or "" for _ in range(r.count()))
    user_data = r.bytes_()
    owned: dict[str, tuple[int, ...]] = {}
    generation = -1
    rack = None
    # a newer version than 3 starts with the same fields (Kafka's forward compatibility)
    if version >= 1:
        owned = r.topic_partitions()
    if version >= 2:
        generation = r.i32()
    if version >= 3:
        rack = r.string()
    return Subscription(version, topics, user_data, owned, generation, rack)


def parse_assignment(data: bytes) -> dict[str, tuple[int, ...]]:
    """The assigned partitions of an assignment (empty bytes: none)."""
    if not data:
        return {}
    r = _Reader(data)
    if r.i16() < 0:
        raise EmbeddedProtocolError("bad assignment version")
    return r.topic_partitions()


def encode_assignment(partitions: Mapping[str, Sequence[int]], version: int = 0) -> bytes:
    """An assignment of ``partitions`` (topic -> partition numbers), at ``version`` (capped to
    3, the newest Kafka has), with no user data."""
    out = bytearray(struct.pack(">hi", min(max(version, 0), 3), len(partitions)))
    for topic in sorted(partitions):
        name = topic.encode("utf-8")
        parts = sorted(partitions[topic])
        out += struct.pack(">h", len(name)) + name + struct.pack(">i", len(parts))
        out += b"".join(struct.pack(">i", p) for p in parts)
    out += struct.pack(">i", -1)
    return bytes(out)


def encode_subscription(topics: Sequence[str], owned: Mapping[str, Sequence[int]] | None = None,
                        version: int = 3, generation: int = -1, rack_id: str | None = None,
                        user_data: bytes | None = None) -> bytes:  # fmt: skip
    """A subscription at ``version`` (0–3), as a classic consumer's JoinGroup carries it."""

    def string(value: str | None) -> bytes:
        if value is None:
            return struct.pack(">h", -1)
        data = value.encode("utf-8")
        return struct.pack(">h", len(data)) + data

    out = bytearray(struct.pack(">hi", version, len(topics)))
    for topic in topics:
        out += string(topic)
    out += struct.pack(">i", -1) if user_data is None else struct.pack(">i", len(user_data)) + user_data
    if version >= 1:
        parts = owned or {}
        out += struct.pack(">i", len(parts))
        for topic in sorted(parts):
            ps = sorted(parts[topic])
            out += string(topic) + struct.pack(">i", len(ps)) + b"".join(struct.pack(">i", p) for p in ps)
    if version >= 2:
        out += struct.pack(">i", generation)
    if version >= 3:
        out += string(rack_id)
    return bytes(out)
