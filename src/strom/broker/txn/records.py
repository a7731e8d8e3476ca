"""Records of ``__transaction_state``, in Kafka's formats (so Kafka's tools can read them).

Key: version int16 (0) | TransactionLogKey v0 = transactionalId (int16 length + UTF-8).

Value: version int16 (1) | TransactionLogValue v1 (flexible): producerId int64 |
producerEpoch int16 | transactionTimeoutMs int32 | transactionStatus int8 |
transactionPartitions compact nullable array of (topic compact string, partitionIds compact
array of int32, tagged fields) | lastUpdateTimestampMs int64 | startTimestampMs int64 | tagged
fields: 0 previousProducerId int64, 1 nextProducerId int64, 2 clientTransactionVersion int16
(written only when not the default). Version 0 values (not flexible) are read too.
A null value is a tombstone: the transactional id expired.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field

from strom.broker.group.records import partition_for
from strom.protocol.varint import VarintError, encode_uvarint, read_uvarint

__all__ = ["STATE_NAMES", "TxnRecordError", "TxnState", "TxnValue", "decode_key", "decode_value",
           "encode_key", "encode_value", "partition_for"]  # fmt: skip

TopicPartition = tuple[str, int]


class TxnRecordError(ValueError):
    """A record of ``__transaction_state`` that cannot be decoded."""


class TxnState(enum.IntEnum):
    """Kafka's ``TransactionState`` ids, as stored."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7


STATE_NAMES = {
    TxnState.EMPTY: "Empty", TxnState.ONGOING: "Ongoing", TxnState.PREPARE_COMMIT: "PrepareCommit",
    TxnState.PREPARE_ABORT: "PrepareAbort", TxnState.COMPLETE_COMMIT: "CompleteCommit",
    TxnState.COMPLETE_ABORT: "CompleteAbort", TxnState.DEAD: "Dead",
    TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}  # fmt: skip
"""Kafka's names of the states (DescribeTransactions, ListTransactions, the CLI)."""


@dataclass(slots=True)
class TxnValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: set[TopicPartition] = field(default_factory=set)
    last_update_ms: int = -1
    start_ms: int = -1
    previous_producer_id: int = -1
    last_epoch: int = field(default=-1, compare=False)  # in memory only, as Kafka's


def _read_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    try:
        return read_uvarint(buf, pos)
    except VarintError as exc:
        raise TxnRecordError(str(exc)) from None


def encode_key(transactional_id: str) -> bytes:
    raw = transactional_id.encode("utf-8")
    return struct.pack(">hh", 0, len(raw)) + raw


def decode_key(data: bytes) -> str:
    if len(data) < 4:
        raise TxnRecordError("transaction log key too short")
    version, n = struct.unpack_from(">hh", data)
    if version != 0 or n < 0 or 4 + n > len(data):
        raise TxnRecordError(f"not a transaction log key (version {version})")
    return data[4 : 4 + n].decode("utf-8")


def encode_value(v: TxnValue) -> bytes:
    out = bytearray(struct.pack(">hqhib", 1, v.producer_id, v.producer_epoch, v.timeout_ms,
                                int(v.state)))  # fmt: skip
    topics: dict[str, list[int]] = {}
    for topic, partition in sorted(v.partitions):
        topics.setdefault(topic, []).append(partition)
    out += encode_uvarint(len(topics) + 1)
    for topic, parts in topics.items():
        raw = topic.encode("utf-8")
        out += encode_uvarint(len(raw) + 1) + raw + encode_uvarint(len(parts) + 1)
        out += b"".join(struct.pack(">i", p) for p in parts)
        out += b"\x00"
    out += struct.pack(">qq", v.last_update_ms, v.start_ms)
    tags: list[tuple[int, bytes]] = []
    if v.previous_producer_id >= 0:
        tags.append((0, struct.pack(">q", v.previous_producer_id)))
    out += encode_uvarint(len(tags))
    for tag, payload in tags:
        out += encode_uvarint(tag) + encode_uvarint(len(payload)) + payload
    return bytes(out)


def decode_value(data: bytes) -> TxnValue:
    try:
        return _decode_value(data)
    except (struct.error, UnicodeDecodeError, IndexError) as exc:
        raise TxnRecordError(f"bad transaction log value: {exc}") from exc


def _decode_value(data: bytes) -> TxnValue:
    version, pid, epoch, timeout, status = struct.unpack_from(">hqhib", data)
    if version not in (0, 1):
        raise TxnRecordError(f"unknown transaction log value version {version}")
    pos = 17
    flexible = version >= 1
    partitions: set[TopicPartition] = set()
    if flexible:
        n, pos = _read_uvarint(data, pos)
        n -= 1
    else:
        (n,) = struct.unpack_from(">i", data, pos)
        pos += 4
    for _ in range(max(n, 0)):
        if flexible:
            size, pos = _read_uvarint(data, pos)
            size -= 1
        else:
            (size,) = struct.unpack_from(">h", data, pos)
            pos += 2
        topic = data[pos : pos + size].decode("utf-8")
        pos += size
        if flexible:
            count, pos = _read_uvarint(data, pos)
            count -= 1
        else:
            (count,) = struct.unpack_from(">i", data, pos)
            pos += 4
        for _ in range(count):
            partitions.add((topic, struct.unpack_from(">i", data, pos)[0]))
            pos += 4
        if flexible:
            pos = _skip_tags(data, pos, {})
    last_update, start = struct.unpack_from(">qq", data, pos)
    pos += 16
    tags: dict[int, bytes] = {}
    if flexible:
        _skip_tags(data, pos, tags)
    value = TxnValue(pid, epoch, timeout, TxnState(status), partitions, last_update, start)
    if 0 in tags and len(tags[0]) == 8:
        value.previous_producer_id = struct.unpack(">q", tags[0])[0]
    return value


def _skip_tags(data: bytes, pos: int, into: dict[int, bytes]) -> int:
    count, pos = _read_uvarint(data, pos)
    for _ in range(count):
        tag, pos = _read_uvarint(data, pos)
        size, pos = _read_uvarint(data, pos)
        into[tag] = data[pos : pos + size]
        pos += size
    return pos


