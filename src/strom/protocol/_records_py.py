"""The record walks of :mod:`strom.protocol.records` in pure Python: the fallback of the native
codec (:mod:`strom.protocol._records_native`, ``_records_native.c``), and its specification.

Both implementations export the same three functions with the same arguments, results and
errors, byte for byte (the differential tests in ``tests/unit/protocol/test_record_codec.py``
hold them to it). Callers use them through :mod:`strom.protocol.records`, never directly.

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

from array import array
from collections.abc import Sequence
from typing import Any

from strom.protocol.varint import Buffer, VarintError, read_raw_varint

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
