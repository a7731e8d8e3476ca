"""Kafka Connect's group sub-protocol: worker metadata and assignments, byte for byte.

Sans-IO. Encodings are Kafka's old-style schemas (big-endian; STRING = int16 length + UTF-8,
NULLABLE_BYTES = int32 length or -1, ARRAY = int32 count or -1), as ``ConnectProtocol`` and
``IncrementalCooperativeConnectProtocol`` write them, so a strom worker's JoinGroup metadata
is what a Java worker would send.

Protocols offered in JoinGroup, by ``connect.protocol`` (preference order):

- ``eager``: ``default`` (version 0)
- ``compatible``: ``compatible`` (1), ``default`` (0)
- ``sessioned``: ``sessioned`` (2), ``compatible`` (1), ``default`` (0)

Metadata v0: ``version:int16 url:STRING config_offset:int64``; v1/v2 add
``allocation:NULLABLE_BYTES`` (the member's current assignment, serialised as below, null when
empty). Assignment v0: ``version error:int16 leader:STRING leader_url:STRING
config_offset:int64 assignment:[connector:STRING tasks:[int32]]``; v1/v2 add ``revoked`` (same
shape, nullable) and ``delay:int32``. Task id -1 in a connector's list means the connector
instance itself.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

CONNECTOR_TASK = -1
NO_ERROR, CONFIG_MISMATCH = 0, 1
PROTOCOL_NAMES = {0: "default", 1: "compatible", 2: "sessioned"}
NAME_VERSIONS = {v: k for k, v in PROTOCOL_NAMES.items()}
MODES = {"eager": 0, "compatible": 1, "sessioned": 2}

TaskId = tuple[str, int]


class ProtocolError(ValueError):
    """Metadata or an assignment that does not parse."""


@dataclass
class ConnectorsAndTasks:
    connectors: list[str] = field(default_factory=list)
    tasks: list[TaskId] = field(default_factory=list)

    def is_empty(self) -> bool:
        return not self.connectors and not self.tasks


@dataclass
class Assignment:
    """What the leader hands a member (v0: the full set to run; v1+: the increment)."""

    version: int = 1
    error: int = NO_ERROR
    leader: str | None = None
    leader_url: str | None = None
    config_offset: int = -1
    assigned: ConnectorsAndTasks = field(default_factory=ConnectorsAndTasks)
    revoked: ConnectorsAndTasks = field(default_factory=ConnectorsAndTasks)
    delay_ms: int = 0


@dataclass
class WorkerState:
    url: str
    config_offset: int
    assignment: Assignment | None = None  # v1+: what the member runs now


class _Writer:
    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def i16(self, v: int) -> None:
        self.parts.append(struct.pack(">h", v))

    def i32(self, v: int) -> None:
        self.parts.append(struct.pack(">i", v))

    def i64(self, v: int) -> None:
        self.parts.append(struct.pack(">q", v))

    def string(self, v: str | None) -> None:
        raw = (v or "").encode()  # Kafka's STRING is not nullable: null writes as ""
        self.i16(len(raw))
        self.parts.append(raw)

    def nullable_bytes(self, v: bytes | None) -> None:
        if v is None:
            self.i32(-1)
        else:
            self.i32(len(v))
            self.parts.append(v)

    def getvalue(self) -> bytes:
        return b"".join(self.parts)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ProtocolError("truncated Connect protocol data")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def at_end(self) -> bool:
        return self.pos >= len(self.data)

    def i16(self) -> int:
        return int(struct.unpack(">h", self._take(2))[0])

    def i32(self) -> int:
        return int(struct.unpack(">i", self._take(4))[0])

    def i64(self) -> int:
        return int(struct.unpack(">q", self._take(8))[0])

    def string(self) -> str:
        n = self.i16()
        try:
            return self._take(n).decode()
        except UnicodeDecodeError as exc:
            raise ProtocolError(f"bad string in Connect protocol data: {exc}") from None

    def nullable_bytes(self) -> bytes | None:
        n = self.i32()
        return None if n == -1 else self._take(n)


def _write_entries(w: _Writer, ct: ConnectorsAndTasks | None) -> None:
    if ct is None:
        w.i32(-1)
        return
    by_connector: dict[str, list[int]] = {}
    for name in dict.fromkeys(ct.connectors):
        by_connector.setdefault(name, []).append(CONNECTOR_TASK)
    for name, task in ct.tasks:
        by_connector.setdefault(name, []).append(task)
    w.i32(len(by_connector))
    for name, ids in by_connector.items():
        w.string(name)
        w.i32(len(ids))
        for i in ids:
            w.i32(i)


def _read_entries(r: _Reader) -> ConnectorsAndTasks:
    out = ConnectorsAndTasks()
    count = r.i32()
    for _ in range(max(count, 0)):
        name = r.string()
        n = r.i32()
        for _ in range(max(n, 0)):
            task = r.i32()
            if task == CONNECTOR_TASK:
                out.connectors.append(name)
            else:
                out.tasks.append((name, task))
    return out


def encode_assignment(a: Assignment) -> bytes:
    w = _Writer()
    w.i16(a.version)
    w.i16(a.error)
    w.string(a.leader)
    w.string(a.leader_url)
    w.i64(a.config_offset)
    _write_entries(w, a.assigned)
    if a.version >= 1:
        _write_entries(w, a.revoked)
        w.i32(a.delay_ms)
    return w.getvalue()


def decode_assignment(data: bytes) -> Assignment:
    r = _Reader(data)
    version = r.i16()
    if version < 0:
        raise ProtocolError(f"Unsupported subscription version: {version}")
    a = Assignment(version=version, error=r.i16(), leader=r.string(), leader_url=r.string(),
                   config_offset=r.i64(), assigned=_read_entries(r))
    if version >= 1 and not r.at_end():  # Kafka tolerates missing fields with defaults
        a.revoked = _read_entries(r)
        if not r.at_end():
            a.delay_ms = r.i32()
    return a


def encode_metadata(state: WorkerState, version: int) -> bytes:
    w = _Writer()
    w.i16(version)
    w.string(state.url)
    w.i64(state.config_offset)
    if version >= 1:
        current = state.assignment
        empty = current is None or (current.assigned.is_empty() and current.leader is None)
        if current is not None and not empty:
            current = Assignment(version, current.error, current.leader, current.leader_url,
                                 current.config_offset, current.assigned, ConnectorsAndTasks(),
                                 current.delay_ms)
        w.nullable_bytes(None if empty or current is None else encode_assignment(current))
    return w.getvalue()


def decode_metadata(data: bytes) -> WorkerState:
    r = _Reader(data)
    version = r.i16()
    if version < 0:
        raise ProtocolError(f"Unsupported subscription version: {version}")
    state = WorkerState(url=r.string(), config_offset=r.i64())
    if version >= 1 and not r.at_end():
        raw = r.nullable_bytes()
        state.assignment = decode_assignment(raw) if raw is not None else None
    return state


def join_protocols(mode: str, state: WorkerState) -> list[tuple[str, bytes]]:
    """(protocol name, metadata) in preference order for ``connect.protocol`` = ``mode``."""
    top = MODES[mode]
    return [(PROTOCOL_NAMES[v], encode_metadata(state, v)) for v in range(top, -1, -1)]
