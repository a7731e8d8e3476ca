"""The record walks of :mod:`strom.protocol.records` in pure Python: the fallback of the native
codec (:mod:`strom.protocol._records_native`, ``_records_native.c``), and its specification.

Both implementations export the same functions with the same arguments, results and errors,
byte for byte (the differential tests in ``tests/unit/protocol/test_record_codec.py`` and, for
:func:`encode` and :func:`murmur2` at the end of this module, ``test_encode_rows.py`` hold them
to it). Callers use them through :mod:`strom.protocol.records`, never directly.

``buf`` is a whole (uncompressed) records section or a buffer holding one: records are read
from ``start`` to ``end``. Record layout: see :mod:`strom.protocol.records`. The walk of one
record, the rules both implementations share (``E`` is the caller's error class: the scan
raises ``InvalidRecordError``, the decoders ``CorruptRecordError``):

1. no byte left where a record should start: "incorrect declared batch size, premature end of
   records"; a varint that runs past its bound (the batch for the length, the record for every
   other field) or is too long (:mod:`strom.protocol.varint`): "found invalid record structure:
   malformed varint";
2. the length must be even (not null), at least 6 (attributes and five one-byte varints) and
   inside the batch: "invalid record size at record {i}";
3. (scan only) offsetDelta must be ``i``: "record {i} has offset delta {d}: inner offsets must
   be 0..n-1";
4. key and value: a negative length is null; a present one must leave at least one byte of the
   record after it: "record {i} ends inside its key" / "... its value";
5. header count >= 0: "record {i} has an invalid header count {n}"; each header key: null is
   "record {i} has a header with a null key" for the scan and ``""`` for the decoders, a length
   past the record "record {i}: a header runs past the record", bytes that are not strict UTF-8
   "record {i} has a header key that is not UTF-8"; each header value: negative length null,
   else inside the record (same message);
6. the fields must end exactly at the record's end: "record {i}: its fields do not add up to its
   length";
7. (decoders only) offset ``base + offsetDelta`` and timestamp ``base + timestampDelta`` must
   fit 64 bits: "record {i}: offset or timestamp out of range";
8. after the last record, no byte may remain: "incorrect declared batch size: {k} bytes after
   record {count - 1}".
"""

from __future__ import annotations

import operator
import struct
from array import array
from collections.abc import Callable, Sequence
from typing import Any

from strom.protocol.varint import Buffer, VarintError, encode_varint, read_raw_varint, varint_size

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_MASK64 = 2**64 - 1

_Bytes = bytes | bytearray

PREMATURE = "incorrect declared batch size, premature end of records"
MALFORMED_VARINT = "found invalid record structure: malformed varint"


def _varint(buf: _Bytes, pos: int, end: int, error: type[Exception]) -> tuple[int, int]:
    try:
        return read_raw_varint(buf, pos, end)
    except VarintError:
        raise error(MALFORMED_VARINT) from None


def _as_bytes(buf: Buffer, start: int, end: int) -> _Bytes:
    """``buf`` as bytes (indexing a memoryview costs more than indexing bytes: one copy is
    cheaper than n lookups), after checking that ``[start, end)`` lies inside it."""
    if start < 0 or start > end or end > len(buf):
        raise ValueError(f"records [{start}, {end}) outside a buffer of {len(buf)} bytes")
    return bytes(buf) if isinstance(buf, memoryview) else buf


def _headers(buf: _Bytes, pos: int, rec_end: int, index: int, error: type[Exception],
             out: list[tuple[str, bytes | None]] | None) -> int:  # fmt: skip
    """Walk (and with ``out``, collect) the headers at ``pos``; the position after them."""
    raw, pos = _varint(buf, pos, rec_end, error)
    count = (raw >> 1) ^ -(raw & 1)
    if count < 0:
        raise error(f"record {index} has an invalid header count {count}")
    for _ in range(count):
        raw, pos = _varint(buf, pos, rec_end, error)
        if raw & 1:
            if out is None:
                raise error(f"record {index} has a header with a null key")
            key = ""
        else:
            size = raw >> 1
            if size > rec_end - pos:
                raise error(f"record {index}: a header runs past the record")
            try:  # keys are strings: the cleaner, internal readers and Spark decode them
                key = str(buf[pos : pos + size], "utf-8")
            except UnicodeDecodeError:
                raise error(f"record {index} has a header key that is not UTF-8") from None
            pos += size
        raw, pos = _varint(buf, pos, rec_end, error)
        value: bytes | None = None
        if not raw & 1:
            size = raw >> 1
            if size > rec_end - pos:
                raise error(f"record {index}: a header runs past the record")
            if out is not None:
                value = bytes(buf[pos : pos + size])
            pos += size
        if out is not None:
            out.append((key, value))
    return pos


def scan(buf: Buffer, start: int, end: int, count: int, ts_low: int, ts_high: int,
         no_timestamp: int, keys_required: bool,
         error: type[Exception]) -> tuple[int, list[int], list[int], int]:  # fmt: skip
    """Validate ``count`` records (module doc, rules 1-6 and 8) without decoding them.

    Returns ``(max timestampDelta, indexes of records whose timestampDelta is outside
    [ts_low, ts_high] and is not no_timestamp, indexes of null-key records when keys_required,
    the sum of the value lengths)``; ``max timestampDelta`` is ``-2**63`` when ``count`` is 0.
    The one- and two-byte varints of the common fields are read inline (the hot path of a
    Produce when the native codec is not built).
    """
    buf = _as_bytes(buf, start, end)
    pos = start
    max_delta = _INT64_MIN
    bad_timestamps: list[int] = []
    null_keys: list[int] = []
    value_bytes = 0
    for index in range(count):
        if pos >= end:
            raise error(PREMATURE)
        b = buf[pos]  # record length
        if b < 0x80:
            raw = b
            pos += 1
        else:
            raw, pos = _varint(buf, pos, end, error)
        if raw & 1 or raw < 12 or (raw >> 1) > end - pos:
            raise error(f"invalid record size at record {index}")
        rec_end = pos + (raw >> 1)
        b = buf[pos + 1]  # timestampDelta, after the attributes byte
        if b < 0x80:
            ts_delta = (b >> 1) ^ -(b & 1)
            pos += 2
        else:
            raw, pos = _varint(buf, pos + 1, rec_end, error)
            ts_delta = (raw >> 1) ^ -(raw & 1)
        b = buf[pos] if pos < rec_end else 0x80  # offsetDelta
        if b < 0x80:
            raw = b
            pos += 1
        else:
            raw, pos = _varint(buf, pos, rec_end, error)
        if raw != index << 1:
            raise error(f"record {index} has offset delta {(raw >> 1) ^ -(raw & 1)}: "
                        "inner offsets must be 0..n-1")  # fmt: skip
        b = buf[pos] if pos < rec_end else 0x80  # key length
        if b < 0x80:
            raw = b
            pos += 1
        else:
            raw, pos = _varint(buf, pos, rec_end, error)
        if not raw & 1:
            if raw >> 1 >= rec_end - pos:
                raise error(f"record {index} ends inside its key")
            pos += raw >> 1
        else:
            if keys_required:
                null_keys.append(index)
            if pos >= rec_end:
                raise error(f"record {index} ends inside its key")
        b = buf[pos]  # value length
        if b < 0x80:
            raw = b
            pos += 1
        elif pos + 1 < rec_end and buf[pos + 1] < 0x80:
            raw = (b & 0x7F) | (buf[pos + 1] << 7)
            pos += 2
        else:
            raw, pos = _varint(buf, pos, rec_end, error)
        if not raw & 1:
            if raw >> 1 >= rec_end - pos:
                raise error(f"record {index} ends inside its value")
            pos += raw >> 1
            value_bytes += raw >> 1
        elif pos >= rec_end:
            raise error(f"record {index} ends inside its value")
        if buf[pos] == 0:  # no headers
            pos += 1
        else:
            pos = _headers(buf, pos, rec_end, index, error, None)
        if pos != rec_end:
            raise error(f"record {index}: its fields do not add up to its length")
        if ts_delta > max_delta:
            max_delta = ts_delta
        if (ts_delta < ts_low or ts_delta > ts_high) and ts_delta != no_timestamp:
            bad_timestamps.append(index)
    if pos != end:
        raise error(
            f"incorrect declared batch size: {end - pos} bytes after record {count - 1}"
        )
    return max_delta, bad_timestamps, null_keys, value_bytes


class _Walked:
    """One record as the decoders walk it (fields past the key are read into it)."""

    __slots__ = ("offset", "timestamp", "key", "value", "headers")

    def __init__(self) -> None:
        self.offset = 0
        self.timestamp = 0
        self.key: bytes | None = None
        self.value: bytes | None = None
        self.headers: list[tuple[str, bytes | None]] = []


def _walk(buf: _Bytes, start: int, end: int, count: int, base_offset: int,
          base_ts: int, ts_type: int, max_ts: int, error: type[Exception]) -> Any:  # fmt: skip
    """Yield each record of one batch's records section (module doc, rules 1-2 and 4-8)."""
    pos = start
    for index in range(count):
        if pos >= end:
            raise error(PREMATURE)
        raw, pos = _varint(buf, pos, end, error)
        if raw & 1 or raw < 12 or (raw >> 1) > end - pos:
            raise error(f"invalid record size at record {index}")
        rec_end = pos + (raw >> 1)
        raw, pos = _varint(buf, pos + 1, rec_end, error)
        ts_delta = (raw >> 1) ^ -(raw & 1)
        raw, pos = _varint(buf, pos, rec_end, error)
        offset_delta = (raw >> 1) ^ -(raw & 1)
        rec = _Walked()
        raw, pos = _varint(buf, pos, rec_end, error)
        if not raw & 1:
            if raw >> 1 >= rec_end - pos:
                raise error(f"record {index} ends inside its key")
            rec.key = bytes(buf[pos : pos + (raw >> 1)])
            pos += raw >> 1
        elif pos >= rec_end:
            raise error(f"record {index} ends inside its key")
        raw, pos = _varint(buf, pos, rec_end, error)
        if not raw & 1:
            if raw >> 1 >= rec_end - pos:
                raise error(f"record {index} ends inside its value")
            rec.value = bytes(buf[pos : pos + (raw >> 1)])
            pos += raw >> 1
        elif pos >= rec_end:
            raise error(f"record {index} ends inside its value")
        pos = _headers(buf, pos, rec_end, index, error, rec.headers)
        if pos != rec_end:
            raise error(f"record {index}: its fields do not add up to its length")
        rec.offset = base_offset + offset_delta
        rec.timestamp = max_ts if ts_type == 1 else base_ts + ts_delta
        if not (_INT64_MIN <= rec.offset <= _INT64_MAX
                and _INT64_MIN <= base_ts + ts_delta <= _INT64_MAX):  # fmt: skip
            raise error(f"record {index}: offset or timestamp out of range")
        yield rec
    if pos != end:
        raise error(
            f"incorrect declared batch size: {end - pos} bytes after record {count - 1}"
        )


def decode(buf: Buffer, start: int, end: int, count: int, base_offset: int, base_ts: int,
           ts_type: int, max_ts: int, error: type[Exception],
           record: type[Any]) -> list[Any]:  # fmt: skip
    """Every record of one batch's records section as ``record(offset, timestamp, key, value,
    headers)``; a LogAppendTime batch (``ts_type`` 1) gives each record ``max_ts``."""
    walked = _walk(_as_bytes(buf, start, end), start, end, count, base_offset, base_ts,
                   ts_type, max_ts, error)  # fmt: skip
    return [record(r.offset, r.timestamp, r.key, r.value, r.headers) for r in walked]


Segment = tuple[Buffer, int, int, int, int, int, int, int]
"""One batch's records for :func:`columns`: ``(buf, start, end, count, base_offset,
base_timestamp, timestamp_type, max_timestamp)``."""


class _Validity:
    """Validity bits and int32 offsets of an Arrow list/binary/string column being built."""

    def __init__(self) -> None:
        self.valid = bytearray()
        self.offsets = array("i", [0])
        self.nulls = 0

    def row(self, present: bool, end: int) -> None:
        n = len(self.offsets) - 1
        if n % 8 == 0:
            self.valid.append(0)
        if present:
            self.valid[n >> 3] |= 1 << (n & 7)
        else:
            self.nulls += 1
        self.offsets.append(end)

    def bitmap(self) -> bytes | None:
        return bytes(self.valid) if self.nulls else None


class _Binary(_Validity):
    """An Arrow binary/string column being built: validity bits, int32 offsets, data."""

    def __init__(self) -> None:
        super().__init__()
        self.data = bytearray()

    def append(self, value: bytes | None) -> None:
        if value is not None:
            self.data += value
        self.row(value is not None, len(self.data))

    def buffers(self) -> tuple[bytes | None, bytes, bytes]:
        return self.bitmap(), self.offsets.tobytes(), bytes(self.data)


def columns(segments: Sequence[Segment], lo: int, hi: int, with_headers: bool,
            error: type[Exception]) -> tuple[Any, ...]:  # fmt: skip
    """The records of ``segments`` whose offset is in ``[lo, hi)`` as Arrow column buffers (see
    :class:`strom.protocol.records.Columns` for the tuple's layout)."""
    offsets = array("q")
    stamps = array("q")
    types = array("i")
    keys, values = _Binary(), _Binary()
    lists = _Validity()  # the headers column: a list per row, null for a row without headers
    hkeys, hvalues = _Binary(), _Binary()
    total = 0
    for buf, start, end, count, base_offset, base_ts, ts_type, max_ts in segments:
        total += end - start
        if total > 2**31 - 1:
            raise error("records of more than 2 GiB in one decode")
        for rec in _walk(_as_bytes(buf, start, end), start, end, count, base_offset, base_ts,
                         ts_type, max_ts, error):  # fmt: skip
            if not lo <= rec.offset < hi:
                continue
            offsets.append(rec.offset)
            micros = (rec.timestamp * 1000) & _MASK64  # wraps as int64 arithmetic does
            stamps.append(micros - (1 << 64) if micros >> 63 else micros)
            types.append(ts_type)
            keys.append(rec.key)
            values.append(rec.value)
            if with_headers:
                for hkey, hvalue in rec.headers:
                    hkeys.append(hkey.encode("utf-8"))
                    hvalues.append(hvalue)
                # Spark's Kafka source gives null, not [], for a record without headers
                lists.row(bool(rec.headers), len(hkeys.offsets) - 1)
    out: tuple[Any, ...] = (len(offsets), offsets.tobytes(), stamps.tobytes(), types.tobytes(),
                            *keys.buffers(), *values.buffers())  # fmt: skip
    if with_headers:
        out += (lists.bitmap(), lists.offsets.tobytes(), *hkeys.buffers()[1:],
                *hvalues.buffers())  # fmt: skip
    return out


# --- encode: Arrow key/value columns into record batches, partitioned as Kafka's Java client --

ArrowBinary = tuple[Buffer | None, Buffer, Buffer | None, int, int]
"""An Arrow binary/string array's buffers: ``(validity bitmap or None, int32 little-endian
offsets, data (None: no bytes), array offset, length)``."""

_M32 = 0xFFFFFFFF
_INT32_MAX = 2**31 - 1
_HEADER_SIZE = 61  # strom.protocol.batch_header.HEADER_SIZE (the layout is written out below)
_BATCH_LENGTH_BASE = _HEADER_SIZE - 12  # batchLength counts the bytes after itself
_INDEX_BOUND = 2**60
_ENCODE_HEADER = struct.Struct(">qiibIhiqqqhii")  # batch_header.HEADER_STRUCT


def murmur2(data: Buffer) -> int:
    """Kafka's ``Utils.murmur2`` (the Java client's key hash, also librdkafka's
    ``murmur2_random``): seed 0x9747b28c, m 0x5bd1e995, r 24, 4-byte little-endian chunks, the
    tail folded in as Java's switch does, 32-bit wrapping; the signed 32-bit result Java
    returns."""
    data = bytes(memoryview(data))  # buffers only, as the native codec (bytes(5) is 5 zeros)
    length = len(data)
    m = 0x5BD1E995
    h = (0x9747B28C ^ length) & _M32
    tail = length & ~3
    for i in range(0, tail, 4):
        k = (int.from_bytes(data[i : i + 4], "little") * m) & _M32
        k ^= k >> 24
        k = (k * m) & _M32
        h = ((h * m) & _M32) ^ k
    rest = length & 3
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * m) & _M32
    h ^= h >> 13
    h = (h * m) & _M32
    h ^= h >> 15
    return h - 2**32 if h > _INT32_MAX else h


class _Column:
    """One checked Arrow binary column: row ``i`` is ``None`` (validity bit clear) or
    ``data[starts[i] : starts[i + 1]]``."""

    def __init__(self, name: str, column: object) -> None:
        if not isinstance(column, tuple) or len(column) != 5:
            raise TypeError(f"{name} must be a tuple (validity, offsets, data, offset, length)")
        self.name = name
        validity, offsets, data, offset, length = column
        self.offset: int = operator.index(offset)
        self.length: int = operator.index(length)
        # bounded so that 4 * (offset + length + 1) stays inside 64 bits (the native codec)
        if not (0 <= self.offset <= _INDEX_BOUND and 0 <= self.length <= _INDEX_BOUND):
            raise ValueError(f"{name}: array offset {self.offset} and length {self.length} "
                             "must be in [0, 2**60]")  # fmt: skip
        self._buffers = (validity, offsets, data)

    def check(self) -> None:
        """Check the buffers against the offset and length (the module's rule order)."""
        name, first, rows = self.name, self.offset, self.length
        validity, offsets, data = self._buffers
        # memoryview first: buffers only, as the native codec (bytes(5) would be 5 zeros)
        self.bits = None if validity is None else bytes(memoryview(validity))
        if self.bits is not None and len(self.bits) * 8 < first + rows:
            raise ValueError(f"{name}: a validity bitmap of {len(self.bits)} bytes is too short "
                             f"for {first + rows} rows")  # fmt: skip
        raw = bytes(memoryview(offsets))
        if len(raw) < 4 * (first + rows + 1):
            raise ValueError(f"{name}: an offsets buffer of {len(raw)} bytes is too short for "
                             f"{first + rows + 1} offsets")  # fmt: skip
        self.data = b"" if data is None else bytes(memoryview(data))
        self.starts = struct.unpack_from(f"<{rows + 1}i", raw, 4 * first)
        previous = 0
        for i, start in enumerate(self.starts):
            if start < 0:
                raise ValueError(f"{name}: offset {first + i} is negative ({start})")
            if i and start < previous:
                raise ValueError(f"{name}: offsets decrease at {first + i} ({previous}, then "
                                 f"{start})")  # fmt: skip
            previous = start
        if previous > len(self.data):
            raise ValueError(f"{name}: offset {first + rows} points past the data ({previous} > "
                             f"{len(self.data)} bytes)")  # fmt: skip

    def row(self, i: int) -> bytes | None:
        if self.bits is not None:
            bit = self.offset + i
            if not self.bits[bit >> 3] >> (bit & 7) & 1:
                return None
        return self.data[self.starts[i] : self.starts[i + 1]]


def _field_size(data: bytes | None) -> int:
    return 1 if data is None else varint_size(len(data)) + len(data)


def _record_size(index: int, key: bytes | None, value: bytes | None) -> int:
    """Bytes of the record at ``index`` of its batch, its length varint included."""
    body = 2 + varint_size(index) + _field_size(key) + _field_size(value) + 1
    return varint_size(body) + body


def _record(index: int, key: bytes | None, value: bytes | None) -> bytes:
    # attributes 0, timestampDelta 0 (every record has the batch's timestamp), offsetDelta
    body = bytearray(b"\x00\x00") + encode_varint(index)
    for data in (key, value):
        if data is None:
            body += encode_varint(-1)
        else:
            body += encode_varint(len(data)) + data
    body.append(0)  # no headers
    return encode_varint(len(body)) + body


def _batch(rows: list[tuple[bytes | None, bytes | None]], timestamp_ms: int,
           crc: Callable[[Buffer], int]) -> bytes:  # fmt: skip
    payload = b"".join(_record(i, key, value) for i, (key, value) in enumerate(rows))
    out = bytearray(_HEADER_SIZE)
    _ENCODE_HEADER.pack_into(
        out, 0, 0, _BATCH_LENGTH_BASE + len(payload), -1, 2, 0, 0, len(rows) - 1,
        timestamp_ms, timestamp_ms, -1, -1, -1, len(rows),
    )  # fmt: skip
    out += payload
    struct.pack_into(">I", out, 17, crc(out) & _M32)
    return bytes(out)


def encode(keys: ArrowBinary | None, values: ArrowBinary, partitions: int,
           null_key_partition: int, timestamp_ms: int, max_batch_bytes: int,
           crc: Callable[[Buffer], int]) -> dict[int, list[bytes]]:  # fmt: skip
    """Rows of Arrow key/value columns (``keys`` None: every key null) as record batches per
    partition: ``{partition: [batch, ...]}``, partitions that got rows, ascending.

    A row's partition: ``null_key_partition`` for a null key, else
    ``(murmur2(key) & 0x7fffffff) % partitions`` (Kafka's ``BuiltInPartitioner``; an empty key
    is hashed). Each partition's rows, in row order, fill batches as
    ``records.build_batch([(key, value, [], timestamp_ms), ...])`` would encode them (base
    offset 0, offset deltas 0..n-1, timestamp deltas 0, no headers, attributes 0, producer id,
    epoch, sequence and partition leader epoch -1); ``crc(batch)`` is the CRC-32C of its bytes
    21..end, written at byte 17. A batch is cut before the record that would make its whole size
    (61-byte header and records) pass ``max_batch_bytes``, or pass 2**31 - 1 bytes; it holds at
    least one record, so a record larger than the cap gets a batch of its own.

    Argument errors, in this order (``name`` is "keys" or "values"):
    ``partitions`` outside [1, 2**31 - 1], ``null_key_partition`` outside [0, partitions),
    ``timestamp_ms`` or ``max_batch_bytes`` outside 64 bits: ValueError; a column that is not a
    5-tuple: TypeError; an array offset or length outside [0, 2**60] (keys, then values), row
    counts that differ; then each column's buffers (keys, then values): bitmap too short,
    offsets buffer too short, a negative offset, decreasing offsets, the last offset past the
    data: ValueError; then, in row order, a record too large for any batch ("row {i}: ...").
    Each offset and validity bit is read once (the native codec keeps what it read: a buffer
    written meanwhile by another thread changes the bytes copied, never the bounds).
    """
    partitions = operator.index(partitions)
    null_key_partition = operator.index(null_key_partition)
    timestamp_ms = operator.index(timestamp_ms)
    max_batch_bytes = operator.index(max_batch_bytes)
    if not 1 <= partitions <= _INT32_MAX:
        raise ValueError(f"partitions {partitions} outside [1, {_INT32_MAX}]")
    if not 0 <= null_key_partition < partitions:
        raise ValueError(f"null_key_partition {null_key_partition} outside [0, {partitions})")
    for name, number in (("timestamp_ms", timestamp_ms), ("max_batch_bytes", max_batch_bytes)):
        if not _INT64_MIN <= number <= _INT64_MAX:
            raise ValueError(f"{name} {number} outside 64 bits")
    key_column = None if keys is None else _Column("keys", keys)
    value_column = _Column("values", values)
    rows = value_column.length
    if key_column is not None and key_column.length != rows:
        raise ValueError(f"{key_column.length} keys for {rows} values")
    if key_column is not None:
        key_column.check()
    value_column.check()
    cap = min(max_batch_bytes, _INT32_MAX)
    groups: dict[int, list[tuple[bytes | None, bytes | None]]] = {}
    for i in range(rows):
        key = None if key_column is None else key_column.row(i)
        value = value_column.row(i)
        size = _record_size(0, key, value)
        if _BATCH_LENGTH_BASE + size > _INT32_MAX:
            raise ValueError(f"row {i}: a record of {size} bytes does not fit a batch")
        # Kafka's BuiltInPartitioner: Utils.toPositive(Utils.murmur2(key)) % partitions
        partition = null_key_partition if key is None else (murmur2(key) & 0x7FFFFFFF) % partitions
        groups.setdefault(partition, []).append((key, value))
    out: dict[int, list[bytes]] = {}
    for partition in sorted(groups):
        batches = out[partition] = []
        batch: list[tuple[bytes | None, bytes | None]] = []
        size = _HEADER_SIZE
        for key, value in groups[partition]:
            record_size = _record_size(len(batch), key, value)
            if batch and size + record_size > cap:
                batches.append(_batch(batch, timestamp_ms, crc))
                batch, size = [], _HEADER_SIZE
                record_size = _record_size(0, key, value)
            batch.append((key, value))
            size += record_size
        batches.append(_batch(batch, timestamp_ms, crc))
    return out
