"""The record codec of Kafka record batch v2: :class:`Record`, the record walks, building batches.

Each record inside a batch's (possibly compressed) payload: length varint, attributes int8,
timestampDelta varlong, offsetDelta varint, keyLength varint (-1 = null) + key,
valueLength varint (-1 = null) + value, headerCount varint, then per header keyLength varint +
utf-8 key, valueLength varint (-1 = null) + value. All varints are zigzag-encoded
(:mod:`strom.protocol.varint`).

Every per-record walk of the code base goes through this module, in one pass over the bytes:

* :func:`scan_records` — the append-time validation of a client batch (Kafka's LogValidator:
  varints, lengths, offset deltas, declared count, header keys) collecting what the per-record
  rules need (KIP-467), without an object per record: the produce path;
* :func:`decode_records` — a batch's records as :class:`Record` objects: the cleaner, the
  transaction markers (transaction index), the group and transaction log replays, timestamp
  lookups;
* :func:`decode_columns` — batches' records as Arrow column buffers, no object per record: the
  Spark source;
* :func:`encode_rows` — the other way: Arrow key/value columns as record batches per partition,
  keys partitioned as Kafka's Java client does (:func:`murmur2`), no object per row: the Spark
  sink's Produce path.

Two implementations give the same answers byte for byte: the native codec
(:mod:`strom.protocol._records_native`, C, built by ``pip install`` when a compiler is there)
and the pure-Python walk (:mod:`strom.protocol._records_py`, which states the rules and the
error messages). The native one is used when it was built, unless the environment says
``STROM_NATIVE=0``; :data:`IMPLEMENTATION` names the one in use, :func:`use` switches (tests).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import NamedTuple

from strom.protocol import _records_py
from strom.protocol import compression as _codec
from strom.protocol.batch_header import (
    COMPRESSION_MASK,
    CONTROL_BIT,
    CRC_POS,
    CREATE_TIME,
    HEADER_SIZE,
    HEADER_STRUCT,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    MAGIC,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    BatchHeader,
    Buffer,
    CorruptRecordError,
    InvalidRecordError,
    compute_crc,
    parse_header,
)
from strom.protocol.varint import VarintError, encode_varint, read_varint

_native_module: ModuleType | None
try:
    from strom.protocol import _records_native as _native_module
except ImportError:  # built without a compiler: the Python walk serves alone
    _native_module = None

Header = tuple[str, bytes | None]

DELETE_HORIZON_BIT = 0x40
"""Batch attribute bit 6 (Kafka 2.8+, KIP-534): baseTimestamp holds the batch's delete horizon,
the time after which the cleaner may drop its tombstones / transaction marker. Record
timestamps stay ``baseTimestamp + timestampDelta``, so they are unchanged by it."""

_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1

# --- which implementation ---------------------------------------------------------------------

NATIVE_AVAILABLE = _native_module is not None
_impl: ModuleType = _records_py
IMPLEMENTATION = "python"


def use(name: str) -> None:
    """Walk records with ``"native"`` or ``"python"`` from now on (tests run both; the
    environment's ``STROM_NATIVE=0`` picks ``"python"`` at import). ``"native"`` raises
    ``RuntimeError`` when the extension was not built."""
    global _impl, IMPLEMENTATION
    if name == "native":
        if _native_module is None:
            raise RuntimeError(
                "strom's native record codec is not built (strom/protocol/_records_native.c): "
                "reinstall strom where a C compiler and the Python headers are present"
            )
        _impl = _native_module
    elif name == "python":
        _impl = _records_py
    else:
        raise ValueError(f"unknown record codec implementation {name!r}")
    IMPLEMENTATION = name


use("native" if NATIVE_AVAILABLE and os.environ.get("STROM_NATIVE", "1") != "0" else "python")


# --- varints (kept here for the record codec's users; the one implementation is varint.py) ----


def decode_varint(buf: Buffer, pos: int) -> tuple[int, int]:
    """Decode a zigzag varint at ``pos``; returns ``(value, next_pos)``.

    Raises :class:`CorruptRecordError` when the buffer ends mid-varint or it exceeds 10 bytes.
    """
    try:
        return read_varint(buf, pos)
    except VarintError as exc:
        raise CorruptRecordError(f"malformed varint: {exc}") from None


# --- the record walks -------------------------------------------------------------------------


@dataclass(slots=True)
class Record:
    """One decoded record; ``offset`` and ``timestamp`` are absolute.

    The native decoder fills the five slots of each new Record directly instead of calling
    ``__init__`` (the largest cost of a decode): keep it a slots dataclass whose ``__init__``
    only assigns these fields (the differential tests compare both decoders' Records)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[Header] = field(default_factory=list)


class RecordScan(NamedTuple):
    """What :func:`scan_records` found (indexes are positions in the batch, from 0)."""

    max_timestamp_delta: int  # largest timestampDelta; -2**63 for no record
    bad_timestamps: list[int]  # timestampDelta outside the bounds
    null_keys: list[int]  # null keys, when keys are required
    value_bytes: int  # the records' value lengths summed (null values count 0)


_new = tuple.__new__


def scan_records(payload: Buffer, count: int, ts_low: int, ts_high: int, no_timestamp: int,
                 keys_required: bool, start: int = 0) -> RecordScan:  # fmt: skip
    """Validate ``count`` records of ``payload`` from byte ``start`` to its end (the records of
    an uncompressed batch are walked in place, ``start`` 61) without decoding them; raise
    :class:`InvalidRecordError` when malformed (rules: :mod:`strom.protocol._records_py`).

    A record whose timestampDelta is outside ``[ts_low, ts_high]`` (bounds as deltas from the
    batch's baseTimestamp, clamped to 64 bits), other than ``no_timestamp`` (the delta meaning
    timestamp -1), goes to ``bad_timestamps``; with ``keys_required`` a null-key record goes to
    ``null_keys``. Stricter than Kafka in one place: every record's offsetDelta must equal its
    index (Kafka silently rewrites compressed batches whose inner offsets are not 0..n-1 and
    stores uncompressed ones as they come; strom stores client bytes unchanged, so it refuses
    them; no client writes such batches).
    """
    if ts_low < _LONG_MIN:
        ts_low = _LONG_MIN
    if ts_high > _LONG_MAX:
        ts_high = _LONG_MAX
    return _new(RecordScan, _impl.scan(payload, start, len(payload), count, ts_low, ts_high,
                                       no_timestamp, keys_required, InvalidRecordError))  # fmt: skip


def payload_of(header: BatchHeader, batch: Buffer, max_size: int | None = None) -> Buffer:
    """The records section of ``batch`` (its header parsed as ``header``): a view of it, or
    decompressed (bounded by ``max_size``; see :func:`strom.protocol.compression.decompress`).
    Raises :class:`CorruptRecordError` when it cannot be decompressed."""
    view = memoryview(batch)[HEADER_SIZE : header.size]
    codec = header.attributes & COMPRESSION_MASK
    if codec == _codec.NONE:
        return view
    try:
        return _codec.decompress(codec, view, max_size)
    except _codec.CompressionCodecError as exc:
        raise CorruptRecordError(str(exc)) from exc


def decode_records(batch: Buffer) -> list[Record]:
    """Decode (and decompress) every record of one whole batch.

    For a LogAppendTime batch every record carries the batch's maxTimestamp, as Kafka does.
    Raises :class:`CorruptRecordError` on any malformed content.
    """
    if len(batch) < HEADER_SIZE:
        raise CorruptRecordError("batch shorter than its header")
    header = parse_header(batch)
    payload = payload_of(header, batch)
    ts_type = LOG_APPEND_TIME if header.attributes & TIMESTAMP_TYPE_BIT else CREATE_TIME
    return _impl.decode(payload, 0, len(payload), header.record_count,  # type: ignore[no-any-return]
                        header.base_offset, header.base_timestamp, ts_type,
                        header.max_timestamp, CorruptRecordError, Record)  # fmt: skip


Segment = tuple[Buffer, int, int, int, int, int, int, int]
"""One batch's records for :func:`decode_columns`: ``(buffer, start, end, record count,
base offset, base timestamp, timestamp type, max timestamp)``; see :func:`segment`."""


def segment(header: BatchHeader, batch: Buffer, max_size: int | None = None) -> Segment:
    """The :data:`Segment` of one whole batch (decompressed when its codec says so)."""
    payload = payload_of(header, batch, max_size)
    ts_type = LOG_APPEND_TIME if header.attributes & TIMESTAMP_TYPE_BIT else CREATE_TIME
    return (payload, 0, len(payload), header.record_count, header.base_offset,
            header.base_timestamp, ts_type, header.max_timestamp)  # fmt: skip


class Columns(NamedTuple):
    """Records as Arrow column buffers (machine byte order), what :func:`decode_columns`
    returns: ``offsets`` and ``timestamps`` (microseconds) int64 per row, ``timestamp_types``
    int32 per row (0 CreateTime, 1 LogAppendTime); key and value binary columns (validity
    bitmap, None when no row is null; int32 offsets, rows + 1 of them; data). With headers: a
    list column (validity: null for a row without headers; int32 offsets into the header
    entries) of structs of a string key (never null: offsets and data) and a binary value."""

    rows: int
    offsets: bytes
    timestamps: bytes
    timestamp_types: bytes
    key_validity: bytes | None
    key_offsets: bytes
    key_data: bytes
    value_validity: bytes | None
    value_offsets: bytes
    value_data: bytes
    header_validity: bytes | None = None
    header_offsets: bytes | None = None
    header_key_offsets: bytes | None = None
    header_key_data: bytes | None = None
    header_value_validity: bytes | None = None
    header_value_offsets: bytes | None = None
    header_value_data: bytes | None = None


def decode_columns(segments: Sequence[Segment], lo: int = _LONG_MIN, hi: int = _LONG_MAX,
                   with_headers: bool = False) -> Columns:  # fmt: skip
    """The records of ``segments`` whose offset is in ``[lo, hi)``, in order, as Arrow column
    buffers, in one pass and without an object per record. At most 2 GiB of records per call.
    Raises :class:`CorruptRecordError` on any malformed record."""
    return Columns(*_impl.columns(segments, lo, hi, with_headers, CorruptRecordError))


ArrowBinary = tuple[Buffer | None, Buffer, Buffer | None, int, int]
"""An Arrow binary/string array's buffers, what :func:`encode_rows` reads: ``(validity bitmap
or None, int32 little-endian offsets, data, array offset, length)``, i.e. ``(*arr.buffers(),
arr.offset, len(arr))`` of a pyarrow ``binary`` or ``string`` array (any object with the buffer
protocol serves; a None data buffer is no bytes). Row ``i`` is null when bit ``offset + i`` of
the bitmap (LSB first) is clear, else ``data[offsets[offset + i] : offsets[offset + i + 1]]``.
``large_binary`` / ``large_string`` arrays (int64 offsets) are cast to ``binary`` / ``string``
first. strom.protocol never imports pyarrow: only the buffers cross."""


def encode_rows(keys: ArrowBinary | None, values: ArrowBinary, partitions: int,
                null_key_partition: int, timestamp_ms: int,
                max_batch_bytes: int) -> dict[int, list[bytes]]:  # fmt: skip
    """Rows of Arrow key/value columns as uncompressed v2 record batches per partition, in one
    pass and without a Python object per row: ``{partition: [batch, ...]}`` for the partitions
    that got rows, in ascending order. ``keys`` None: every key null.

    A null key goes to ``null_key_partition``; any other key (an empty one too) to
    ``(murmur2(key) & 0x7fffffff) % partitions``, the partition Kafka's Java client and
    librdkafka's ``murmur2_random`` pick. Each partition's rows, in row order, fill batches that
    are byte for byte ``build_batch([(key, value, [], timestamp_ms), ...])`` of their rows (base
    offset 0, no producer id, CreateTime ``timestamp_ms``, valid CRC-32C). A batch is cut before
    the record that would make its whole size pass ``max_batch_bytes``; it always holds at least
    one record, so a record larger than the cap gets a batch of its own (the broker answers
    MESSAGE_TOO_LARGE, which the caller wants to see). Bad arguments (partitions < 1, a
    ``null_key_partition`` outside ``[0, partitions)``, short or inconsistent buffers, negative
    or decreasing offsets, offsets past the data, row counts that differ) raise ``ValueError``
    with one line; the rules and messages: :func:`strom.protocol._records_py.encode`.
    """
    return _impl.encode(keys, values, partitions, null_key_partition,  # type: ignore[no-any-return]
                        timestamp_ms, max_batch_bytes, compute_crc)  # fmt: skip


def murmur2(data: Buffer) -> int:
    """Kafka's ``Utils.murmur2`` of ``data``: the signed 32-bit hash the Java client partitions
    keys by (``toPositive(murmur2(key)) % partitions``)."""
    return _impl.murmur2(data)  # type: ignore[no-any-return]


def build_batch(
    records: Sequence[tuple[bytes | None, bytes | None, Sequence[Header], int]],
    *,
    base_offset: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    compression: int = 0,
    timestamp_type: int = CREATE_TIME,
    partition_leader_epoch: int = -1,
) -> bytes:
    """Encode ``(key, value, headers, timestamp_ms)`` tuples as one batch with a valid CRC.

    Offset deltas are 0..n-1; baseTimestamp is the first record's timestamp.
    """
    entries = [
        Record(base_offset + i, ts, key, value, list(headers))
        for i, (key, value, headers, ts) in enumerate(records)
    ]
    return build_batch_from_records(
        entries,
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=is_transactional,
        is_control=is_control,
        compression=compression,
        timestamp_type=timestamp_type,
        partition_leader_epoch=partition_leader_epoch,
    )


def build_batch_from_records(
    records: Sequence[Record],
    *,
    base_offset: int,
    last_offset_delta: int | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    compression: int = 0,
    timestamp_type: int = CREATE_TIME,
    partition_leader_epoch: int = -1,
    max_timestamp: int | None = None,
    delete_horizon_ms: int | None = None,
) -> bytes:
    """Encode records keeping their absolute offsets (the compactor's path: gaps allowed).

    ``last_offset_delta`` defaults to the last record's delta; pass it to keep the original
    batch's offset range when trailing records were removed. An empty record list is allowed
    (Kafka keeps such batches to preserve producer state). ``delete_horizon_ms`` sets
    :data:`DELETE_HORIZON_BIT` and stores the horizon as baseTimestamp.
    """
    base_ts = records[0].timestamp if records else -1
    if delete_horizon_ms is not None:
        base_ts = delete_horizon_ms
    body = bytearray()
    for rec in records:
        rec_body = bytearray(b"\x00")
        rec_body += encode_varint(rec.timestamp - base_ts)
        rec_body += encode_varint(rec.offset - base_offset)
        _write_bytes(rec_body, rec.key)
        _write_bytes(rec_body, rec.value)
        rec_body += encode_varint(len(rec.headers))
        for hkey, hvalue in rec.headers:
            _write_bytes(rec_body, hkey.encode("utf-8"))
            _write_bytes(rec_body, hvalue)
        body += encode_varint(len(rec_body))
        body += rec_body
    payload = _codec.compress(compression, body)
    if last_offset_delta is None:
        last_offset_delta = records[-1].offset - base_offset if records else 0
    if max_timestamp is None:
        max_timestamp = max((r.timestamp for r in records), default=-1)
    attributes = compression & COMPRESSION_MASK
    if timestamp_type == LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_BIT
    if is_transactional:
        attributes |= TRANSACTIONAL_BIT
    if is_control:
        attributes |= CONTROL_BIT
    if delete_horizon_ms is not None:
        attributes |= DELETE_HORIZON_BIT
    out = bytearray(HEADER_SIZE)
    HEADER_STRUCT.pack_into(
        out, 0, base_offset, HEADER_SIZE - LOG_OVERHEAD + len(payload), partition_leader_epoch,
        MAGIC, 0, attributes, last_offset_delta, base_ts, max_timestamp, producer_id,
        producer_epoch, base_sequence, len(records),
    )  # fmt: skip
    out += payload
    struct.pack_into(">I", out, CRC_POS, compute_crc(out))
    return bytes(out)


def _write_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        out += encode_varint(-1)
    else:
        out += encode_varint(len(data))
        out += data
