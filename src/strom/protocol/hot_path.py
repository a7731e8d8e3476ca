"""Hand-written encoders for the request-rate hot path: response headers, Produce and Fetch.

Why: ``kio`` encodes any message generically, field by field through wrapper types, and a
response costs more than the records it acknowledges (an empty 50-partition Fetch response
took ~365 µs, a one-partition Produce response ~17 µs). Everything else keeps going through
``kio`` (:mod:`strom.protocol.messages`); only these messages, which every client sends many
times a second, are written here, from plain tuples, straight into one ``bytearray``.
Decoding stays with ``kio``: its readers are native code, faster than Python written by hand
(measured: a Produce v9 request header 1.3 µs by ``kio``, 5.6 µs by hand, in the same run).

Wire layouts (Kafka's ``ProduceResponse.json`` / ``FetchResponse.json``; ``[flex]`` means
"flexible versions only": compact arrays/strings/bytes as uvarint(n + 1), and an empty
tagged-field section, the byte 0, after every struct):

- Response header: ``int32 correlation_id`` then, for flexible versions, ``[flex] tags``
  (except ApiVersions, whose response header is always v0).
- Produce v3–13 (flexible from v9): ``responses: [name: string (v≤12) | topic_id: uuid
  (v13+), partition_responses:
  [index: int32, error_code: int16, base_offset: int64, log_append_time_ms: int64 (v2+),
  log_start_offset: int64 (v5+), record_errors: [batch_index: int32,
  batch_index_error_message: nullable string] (v8+), error_message: nullable string (v8+),
  tag 0 (v10+) current_leader: {leader_id: int32, leader_epoch: int32}]], throttle_time_ms:
  int32, tag 0 (v10+) node_endpoints: [node_id: int32, host: string, port: int32, rack:
  nullable string]``. KIP-951: the two tagged fields are written only when given (a
  NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH answer naming the leader the broker knows),
  so the client moves to the new leader without asking for metadata first.
- Fetch v4–18 (flexible from v12): ``throttle_time_ms: int32, error_code: int16 (v7+),
  session_id: int32 (v7+), responses: [topic: string (v≤12) | topic_id: uuid (v13+),
  partitions: [partition_index: int32, error_code: int16, high_watermark: int64,
  last_stable_offset: int64, log_start_offset: int64 (v5+), aborted_transactions: nullable
  [producer_id: int64, first_offset: int64], preferred_read_replica: int32 (v11+), records:
  nullable bytes]]``. The tagged fields (diverging epoch, current leader, snapshot id, node
  endpoints) are always written as absent, which is what their defaults mean.

A partition's ``records`` may be a *region* (any object with an integer ``length``, such as a
file region to ``sendfile``): the encoder then returns the frame as parts ``[bytes, region,
bytes, …]`` with the region's length prefix in place, so the records never pass through Python.

Invariant, tested for every version served (``tests/unit/protocol/test_hot_path.py``): the
bytes equal what ``kio`` writes for the same response, and ``kio`` decodes them back to it.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any, NamedTuple
from uuid import UUID

from strom.protocol.varint import encode_uvarint

_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_I64 = struct.Struct(">q")
_ABORTED = struct.Struct(">qq")
_PRODUCE_V3 = struct.Struct(">ihqq")  # index, error, base offset, log append time
_PRODUCE_V5 = struct.Struct(">ihqqq")  # + log start offset
_PRODUCE_FIRST_LEADER_HINTS = 10  # KIP-951's tagged current_leader / node_endpoints
# tagged-field section with one field, tag 0, of 9 bytes: leader id, leader epoch, no tags
_CURRENT_LEADER = struct.Struct(">BBBiiB")
_FETCH_V4 = struct.Struct(">ihqq")  # index, error, high watermark, last stable offset
_FETCH_V5 = struct.Struct(">ihqqq")  # + log start offset
_FETCH_TOP_V7 = struct.Struct(">ihi")  # throttle, error, session id

_NULL_UUID = bytes(16)
PRODUCE_VERSIONS = range(3, 14)
FETCH_VERSIONS = range(4, 19)
_PRODUCE_FIRST_FLEXIBLE = 9
_FETCH_FIRST_FLEXIBLE = 12
#: Fetch records read as bytes (no sendfile) this long are a part of their own: copying them
#: into the body, the body into the frame and the frame into one write buffer cost three
#: allocations of their size per response (a MiB-sized buffer each, page-faulted afresh
#: whenever the allocator returned the previous one to the system).
OWN_PART_BYTES = 64 * 1024


def response_header(correlation_id: int, flexible: bool) -> bytes:
    """Response header v0 (``int32 correlation_id``) or v1 (and an empty tag section)."""
    return _I32.pack(correlation_id) + b"\0" if flexible else _I32.pack(correlation_id)


def _array_len(out: bytearray, n: int, flexible: bool) -> None:
    out += encode_uvarint(n + 1) if flexible else _I32.pack(n)


def _string(out: bytearray, value: str, flexible: bool) -> None:
    data = value.encode()
    out += encode_uvarint(len(data) + 1) if flexible else _I16.pack(len(data))
    out += data


def _nullable_string(out: bytearray, value: str | None, flexible: bool) -> None:
    if value is None:
        out += b"\0" if flexible else b"\xff\xff"
    else:
        _string(out, value, flexible)


# Produce -------------------------------------------------------------------------------------


class ProducePartition(NamedTuple):
    partition_index: int
    error_code: int
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    record_errors: Sequence[tuple[int, str | None]] = ()  # (batch index, message), KIP-467
    current_leader: tuple[int, int] | None = None  # (leader id, leader epoch), KIP-951


class ProduceResponse(NamedTuple):
    """``topics``: (topic name, partition results[, topic id]) in request order; the id is
    what v13+ writes (a null id as zeros). ``node_endpoints``: (node id, host, port, rack) of
    the leaders named in ``current_leader`` (KIP-951, v10+)."""

    topics: Sequence[tuple[Any, ...]]
    throttle_time_ms: int = 0
    node_endpoints: Sequence[tuple[int, str, int, str | None]] = ()


def _node_endpoints(endpoints: Sequence[tuple[int, str, int, str | None]]) -> bytes:
    """The top-level tagged-field section holding ``node_endpoints`` (tag 0)."""
    data = bytearray()
    _array_len(data, len(endpoints), True)
    for node_id, host, port, rack in endpoints:
        data += _I32.pack(node_id)
        _string(data, host, True)
        data += _I32.pack(port)
        _nullable_string(data, rack, True)
        data += b"\0"
    return b"\x01\x00" + encode_uvarint(len(data)) + bytes(data)


def encode_produce(version: int, response: ProduceResponse) -> bytearray:
    """The Produce response body (no header) for ``version`` (3–13)."""
    flexible = version >= _PRODUCE_FIRST_FLEXIBLE
    hints = version >= _PRODUCE_FIRST_LEADER_HINTS
    out = bytearray()
    _array_len(out, len(response.topics), flexible)
    for entry in response.topics:
        name, partitions = entry[0], entry[1]
        if version >= 13:
            topic_id = entry[2] if len(entry) > 2 else None
            out += topic_id.bytes if topic_id is not None else _NULL_UUID
        else:
            _string(out, name, flexible)
        _array_len(out, len(partitions), flexible)
        for p in partitions:
            if version >= 5:
                out += _PRODUCE_V5.pack(p.partition_index, p.error_code, p.base_offset,
                                        p.log_append_time, p.log_start_offset)  # fmt: skip
            else:
                out += _PRODUCE_V3.pack(p.partition_index, p.error_code, p.base_offset, p.log_append_time)
            if version >= 8:
                _array_len(out, len(p.record_errors), flexible)
                for batch_index, message in p.record_errors:
                    out += _I32.pack(batch_index)
                    _nullable_string(out, message, flexible)
                    if flexible:
                        out += b"\0"
                _nullable_string(out, p.error_message, flexible)
            if flexible:
                if p.current_leader is not None and hints:
                    out += _CURRENT_LEADER.pack(1, 0, 9, *p.current_leader, 0)
                else:
                    out += b"\0"
        if flexible:
            out += b"\0"
    out += _I32.pack(response.throttle_time_ms)
    if flexible:
        if response.node_endpoints and hints:
            out += _node_endpoints(response.node_endpoints)
        else:
            out += b"\0"
    return out


# Fetch ---------------------------------------------------------------------------------------


class FetchPartition(NamedTuple):
    partition_index: int
    error_code: int
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    aborted_transactions: Sequence[tuple[int, int]] | None = None  # (producer id, first offset)
    preferred_read_replica: int = -1
    records: Any = b""  # bytes, None, or a region (an object with an int ``length``)


class FetchTopic(NamedTuple):
    topic: str
    topic_id: UUID
    partitions: Sequence[FetchPartition]


class FetchResponse(NamedTuple):
    topics: Sequence[FetchTopic]
    throttle_time_ms: int = 0
    error_code: int = 0
    session_id: int = 0


_FETCH_HEADS: dict[int, tuple[struct.Struct, int, bytes]] = {}


def _fetch_partition_head(version: int) -> tuple[struct.Struct, int, bytes]:
    """For a partition without aborted transactions: the struct of its fields up to the
    records (index, error, high watermark, last stable offset, [log start offset], null
    aborted list, [preferred read replica]), the null list's value, and the bytes that end
    a partition with empty records (length 0, [tags])."""
    cached = _FETCH_HEADS.get(version)
    if cached is None:
        flexible = version >= _FETCH_FIRST_FLEXIBLE
        fmt = ">ihqq" + ("q" if version >= 5 else "") + ("B" if flexible else "i")
        fmt += "i" if version >= 11 else ""
        cached = _FETCH_HEADS[version] = (
            struct.Struct(fmt),
            0 if flexible else -1,
            b"\x01\x00" if flexible else b"\0\0\0\0",
        )
    return cached


def encode_fetch(version: int, response: FetchResponse) -> list[Any]:
    """The Fetch response body (no header) for ``version`` (4–16) as parts: one bytes object,
    or bytes and regions alternating when some partition's records are a region, or bytes of
    at least :data:`OWN_PART_BYTES` (a part of their own, not copied: a connection writes the
    parts as they are)."""
    flexible = version >= _FETCH_FIRST_FLEXIBLE
    head, null_aborted, empty_tail = _fetch_partition_head(version)
    parts: list[Any] = []
    out = bytearray()
    if version >= 7:
        out += _FETCH_TOP_V7.pack(response.throttle_time_ms, response.error_code,
                                  response.session_id)  # fmt: skip
    else:
        out += _I32.pack(response.throttle_time_ms)
    _array_len(out, len(response.topics), flexible)
    for topic in response.topics:
        if version >= 13:
            out += topic.topic_id.bytes
        else:
            _string(out, topic.topic, flexible)
        _array_len(out, len(topic.partitions), flexible)
        for p in topic.partitions:
            aborted = p.aborted_transactions
            if aborted is None:  # the usual case: one pack up to the records
                if version >= 11:
                    out += head.pack(p[0], p[1], p[2], p[3], p[4], null_aborted, p[6])
                elif version >= 5:
                    out += head.pack(p[0], p[1], p[2], p[3], p[4], null_aborted)
                else:
                    out += head.pack(p[0], p[1], p[2], p[3], null_aborted)
                if isinstance(p.records, bytes) and not p.records:
                    out += empty_tail
                    continue
            elif version >= 5:
                out += _FETCH_V5.pack(p.partition_index, p.error_code, p.high_watermark,
                                      p.last_stable_offset, p.log_start_offset)  # fmt: skip
            else:
                out += _FETCH_V4.pack(p.partition_index, p.error_code, p.high_watermark,
                                      p.last_stable_offset)  # fmt: skip
            if aborted is not None:
                _array_len(out, len(aborted), flexible)
                for producer_id, first_offset in aborted:
                    out += _ABORTED.pack(producer_id, first_offset)
                    if flexible:
                        out += b"\0"
                if version >= 11:
                    out += _I32.pack(p.preferred_read_replica)
            records = p.records
            if records is None:
                out += b"\0" if flexible else b"\xff\xff\xff\xff"
            elif isinstance(records, bytes | bytearray | memoryview):
                n = len(records)
                out += encode_uvarint(n + 1) if flexible else _I32.pack(n)
                if n >= OWN_PART_BYTES and type(records) is bytes:
                    parts.append(bytes(out))
                    parts.append(records)
                    out = bytearray()
                else:
                    out += records
            else:  # a region: its length prefix here, its bytes sent by the caller
                n = records.length
                out += encode_uvarint(n + 1) if flexible else _I32.pack(n)
                parts.append(bytes(out))
                parts.append(records)
                out = bytearray()
            if flexible:
                out += b"\0"
        if flexible:
            out += b"\0"
    if flexible:
        out += b"\0"
    parts.append(bytes(out))
    return parts


# Frames --------------------------------------------------------------------------------------


class EncodedBody(NamedTuple):
    """A response body encoded once (by ``kio``) and reused as is: the server adds the header.
    ``flexible``: whether the response version is flexible (header v1)."""

    data: bytes
    flexible: bool


def frame(correlation_id: int, flexible_header: bool, body: Sequence[Any]) -> list[Any]:
    """``int32 size | header | body`` as parts (the header joined to the first body part)."""
    header = response_header(correlation_id, flexible_header)
    size = len(header) + sum(len(p) if isinstance(p, bytes | bytearray) else p.length
                             for p in body)  # fmt: skip
    first = b"".join((_I32.pack(size), header, body[0]))
    if len(body) == 1:
        return [first]
    return [first, *body[1:]]


def body_frame(correlation_id: int, body: EncodedBody) -> bytes:
    """The frame of a cached body, size prefix included."""
    header = response_header(correlation_id, body.flexible)
    return b"".join((_I32.pack(len(header) + len(body.data)), header, body.data))


def produce_frame(version: int, correlation_id: int, response: ProduceResponse) -> bytes:
    """The whole Produce response frame, size prefix included."""
    body = encode_produce(version, response)
    header = response_header(correlation_id, version >= _PRODUCE_FIRST_FLEXIBLE)
    return b"".join((_I32.pack(len(header) + len(body)), header, body))


def fetch_frame(version: int, correlation_id: int, response: FetchResponse) -> list[Any]:
    """The whole Fetch response frame as parts, see :func:`encode_fetch`."""
    return frame(correlation_id, version >= _FETCH_FIRST_FLEXIBLE, encode_fetch(version, response))
