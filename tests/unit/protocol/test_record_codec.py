"""The native record codec against its pure-Python specification, and both against the data.

Every function of :mod:`strom.protocol._records_native` must give the answer of
:mod:`strom.protocol._records_py` byte for byte: the same result, or the same error class with
the same message. Hypothesis generates the batches (every compression codec, control batches,
LogAppendTime, headers with any key) and then breaks them (malformed varints, truncated
records, header edge cases, random bytes).
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strom.protocol import _records_py, compression, records
from strom.protocol import record_batch as rb
from strom.protocol.varint import encode_varint

try:
    from strom.protocol import _records_native as native
except ImportError:  # test_the_native_codec_is_built fails; the differential tests cannot run
    native = None

pytestmark = pytest.mark.skipif(native is None, reason="the native record codec is not built")

Invalid, Corrupt = rb.InvalidRecordError, rb.CorruptRecordError
CODECS = [compression.NONE, compression.GZIP, compression.SNAPPY, compression.LZ4,
          compression.ZSTD]  # fmt: skip
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# STROM_CODEC_EXAMPLES=5000 for a deeper run by hand
FAST = settings(max_examples=int(os.environ.get("STROM_CODEC_EXAMPLES", "150")), deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])  # fmt: skip


def outcome(fn: Callable[..., Any], *args: Any) -> tuple[Any, Any]:
    try:
        return "ok", fn(*args)
    except (Invalid, Corrupt, ValueError) as exc:
        return type(exc), str(exc)


def same(name: str, *args: Any) -> tuple[Any, Any]:
    """Call ``name`` on both implementations; assert identical outcomes; return it."""
    expected = outcome(getattr(_records_py, name), *args)
    got = outcome(getattr(native, name), *args)
    assert got == expected
    return expected


def scan_both(payload: bytes, count: int, low: int = INT64_MIN, high: int = INT64_MAX,
              no_ts: int = 0, keys: bool = True, start: int = 0) -> tuple[Any, Any]:  # fmt: skip
    return same("scan", payload, start, len(payload), count, low, high, no_ts, keys, Invalid)


def decode_both(payload: bytes, count: int, base_offset: int = 100, base_ts: int = 10**12,
                ts_type: int = 0, max_ts: int = 5) -> tuple[Any, Any]:  # fmt: skip
    return same("decode", payload, 0, len(payload), count, base_offset, base_ts, ts_type,
                max_ts, Corrupt, rb.Record)  # fmt: skip


def columns_both(segments: list[Any], lo: int = INT64_MIN, hi: int = INT64_MAX,
                 headers: bool = True) -> tuple[Any, Any]:  # fmt: skip
    return same("columns", segments, lo, hi, headers, Corrupt)


def all_three(payload: bytes, count: int) -> None:
    scan_both(payload, count)
    decode_both(payload, count)
    columns_both([(payload, 0, len(payload), count, 7, 1000, 0, 0)])


# --- generated records -----------------------------------------------------------------------

header_keys = st.one_of(st.text(max_size=8), st.sampled_from(["", "é", "\U0001f600", "k"]))
optional_bytes = st.one_of(st.none(), st.binary(max_size=40))
record_strategy = st.tuples(
    optional_bytes,  # key
    optional_bytes,  # value
    st.lists(st.tuples(header_keys, optional_bytes), max_size=3),  # headers
    st.integers(min_value=-(2**40), max_value=2**40),  # timestamp delta
)


@st.composite
def batches(draw: st.DrawFn) -> tuple[bytes, list[Any]]:
    items = draw(st.lists(record_strategy, min_size=1, max_size=12))
    base = 1_700_000_000_000
    codec = draw(st.sampled_from(CODECS))
    control = draw(st.booleans())
    log_append = draw(st.booleans())
    data = rb.build_batch([(k, v, h, base + dt) for k, v, h, dt in items], compression=codec,
                          is_control=control, is_transactional=control,
                          producer_id=9 if control else -1, producer_epoch=0 if control else -1,
                          timestamp_type=rb.LOG_APPEND_TIME if log_append else rb.CREATE_TIME,
                          base_offset=draw(st.integers(0, 2**40)))  # fmt: skip
    return data, items


@FAST
@given(batches())
def test_generated_batches_decode_alike_and_right(generated: tuple[bytes, list[Any]]) -> None:
    data, items = generated
    header = rb.parse_header(data)
    payload = bytes(records.payload_of(header, data))
    kind, scanned = scan_both(payload, header.record_count, -(2**39), 2**39, -1, True)
    assert kind == "ok"
    assert scanned[2] == [i for i, item in enumerate(items) if item[0] is None]
    assert scanned[3] == sum(len(v) for _k, v, _h, _t in items if v is not None)
    kind, decoded = decode_both(payload, header.record_count, header.base_offset,
                                header.base_timestamp, header.timestamp_type,
                                header.max_timestamp)  # fmt: skip
    assert kind == "ok"
    base = header.base_timestamp
    for i, (rec, (key, value, hdrs, _dt)) in enumerate(zip(decoded, items, strict=True)):
        assert (rec.offset, rec.key, rec.value) == (header.base_offset + i, key, value)
        assert rec.headers == list(hdrs)
        if header.timestamp_type == rb.LOG_APPEND_TIME:
            assert rec.timestamp == header.max_timestamp
        else:
            assert rec.timestamp == base + (items[i][3] - items[0][3])
    # the whole-batch entry point, on both implementations
    for impl in ("python", "native"):
        records.use(impl)
        try:
            assert records.decode_records(data) == decoded
        finally:
            records.use("native")
    segment = records.segment(header, data)
    lo = header.base_offset + len(items) // 3
    for lo_hi in ((INT64_MIN, INT64_MAX), (lo, lo + 2)):
        for with_headers in (True, False):
            kind, cols = columns_both([segment, segment], *lo_hi, with_headers)
            assert kind == "ok"
            wanted = [r for r in decoded if lo_hi[0] <= r.offset < lo_hi[1]]
            assert cols[0] == 2 * len(wanted)
            assert list(struct.unpack(f"={cols[0]}q", cols[1])) == [r.offset for r in wanted] * 2


@FAST
@given(batches(), st.data())
def test_broken_batches_fail_alike(generated: tuple[bytes, list[Any]], data: st.DataObject) -> None:
    """Truncate, flip, insert or delete bytes of a records section: same answer from both."""
    raw, _items = generated
    header = rb.parse_header(raw)
    payload = bytearray(records.payload_of(header, raw))
    how = data.draw(st.sampled_from(["truncate", "flip", "insert", "delete", "count"]))
    count = header.record_count
    if how == "truncate":
        del payload[data.draw(st.integers(0, max(len(payload) - 1, 0))):]
    elif how == "flip":
        for _ in range(data.draw(st.integers(1, 4))):
            pos = data.draw(st.integers(0, len(payload) - 1))
            payload[pos] = data.draw(st.integers(0, 255))
    elif how == "insert":
        pos = data.draw(st.integers(0, len(payload)))
        payload[pos:pos] = data.draw(st.binary(min_size=1, max_size=12))
    elif how == "delete":
        pos = data.draw(st.integers(0, len(payload) - 1))
        del payload[pos : pos + data.draw(st.integers(1, 6))]
    else:
        count = data.draw(st.integers(-2, count + 3))
    all_three(bytes(payload), count)


@FAST
@given(st.binary(max_size=200), st.integers(-1, 20))
def test_random_bytes_fail_alike(payload: bytes, count: int) -> None:
    all_three(payload, count)


# --- hand-made edge cases --------------------------------------------------------------------


def record(offset_delta: int = 0, key: bytes | None = b"k", value: bytes | None = b"v", *,
           ts_delta: int = 0, headers: bytes = b"\x00", raw_key: bytes | None = None,
           length_fix: int = 0) -> bytes:  # fmt: skip
    body = b"\x00" + encode_varint(ts_delta) + encode_varint(offset_delta)
    if raw_key is not None:
        body += raw_key
    else:
        body += encode_varint(-1) if key is None else encode_varint(len(key)) + key
    body += encode_varint(-1) if value is None else encode_varint(len(value)) + value
    body += headers
    return encode_varint(len(body) + length_fix) + body


def header(key: bytes | None, value: bytes | None) -> bytes:
    out = encode_varint(-1) if key is None else encode_varint(len(key)) + key
    return out + (encode_varint(-1) if value is None else encode_varint(len(value)) + value)


EDGE_CASES = {
    "good": (record(0) + record(1), 2),
    "eleven-byte varint": (b"\xff" * 11, 1),
    "ten bytes, last past bit 63": (b"\xff" * 9 + b"\x02" + record(0), 1),
    "ten-byte timestamp": (record(0, ts_delta=-(2**63)), 1),
    "truncated length varint": (b"\x80", 1),
    "truncated record": (record(0)[:-1], 1),
    "record one byte short": (record(0, length_fix=-1), 1),
    "record one byte long": (record(0, length_fix=1) + b"\x00", 1),
    "length odd (negative)": (b"\x01" + b"\x00" * 10, 1),
    "length too small": (b"\x0a" + b"\x00" * 5, 1),
    "length huge": (encode_varint(2**62) + b"\x00" * 8, 1),
    "count high": (record(0), 2),
    "count low": (record(0) + record(1), 1),
    "count zero, bytes left": (record(0), 0),
    "offset delta wrong": (record(0) + record(2), 2),
    "offset delta negative": (record(-1), 1),
    "key runs to the end": (record(0, raw_key=encode_varint(5) + b"k"), 1),
    "key length huge": (record(0, raw_key=encode_varint(2**62)), 1),
    "null key": (record(0, None), 1),
    "null value": (record(0, b"k", None), 1),
    "empty key and value": (record(0, b"", b""), 1),
    "value length huge": (encode_varint(15) + b"\x00\x00\x00\x02k" + encode_varint(2**62)
                          + b"\x00", 1),  # fmt: skip
    "header count negative": (record(0, headers=b"\x01"), 1),
    "header count huge": (record(0, headers=encode_varint(2**62)), 1),
    "header null key": (record(0, headers=b"\x02" + header(None, b"x")), 1),
    "header empty key": (record(0, headers=b"\x02" + header(b"", b"x")), 1),
    "header null value": (record(0, headers=b"\x02" + header(b"h", None)), 1),
    "header key not UTF-8": (record(0, headers=b"\x02" + header(b"\xce", b"")), 1),
    "header key surrogate": (record(0, headers=b"\x02" + header(b"\xed\xa0\x80", b"")), 1),
    "header key overlong": (record(0, headers=b"\x02" + header(b"\xc0\xaf", b"")), 1),
    "header key past U+10FFFF": (record(0, headers=b"\x02" + header(b"\xf4\x90\x80\x80", b"")), 1),
    "header key 4-byte ok": (record(0, headers=b"\x02" + header("\U0001f600".encode(), b"")), 1),
    "header key runs past": (record(0, headers=b"\x02" + encode_varint(40) + b"ab"), 1),
    "header value runs past": (record(0, headers=b"\x02" + header(b"h", None)[:-1]
                                      + encode_varint(40)), 1),  # fmt: skip
    "header key truncated UTF-8": (record(0, headers=b"\x02" + header(b"\xe2\x82", b"")), 1),
    "trailing byte": (record(0) + b"\x00", 1),
}


@pytest.mark.parametrize("case", EDGE_CASES)
def test_edge_cases_answer_alike(case: str) -> None:
    payload, count = EDGE_CASES[case]
    all_three(payload, count)
    # and in place, after a 61-byte header, as the produce path walks uncompressed batches
    scan_both(b"\x55" * rb.HEADER_SIZE + payload, count, start=rb.HEADER_SIZE)


def test_edge_case_answers() -> None:
    """A few answers spelled out (the rules of _records_py's docstring)."""
    assert scan_both(*EDGE_CASES["eleven-byte varint"]) == (Invalid, _records_py.MALFORMED_VARINT)
    assert scan_both(*EDGE_CASES["count high"]) == (Invalid, _records_py.PREMATURE)
    assert scan_both(*EDGE_CASES["header null key"]) == (
        Invalid, "record 0 has a header with a null key")  # fmt: skip
    kind, decoded = decode_both(*EDGE_CASES["header null key"])
    assert kind == "ok" and decoded[0].headers == [("", b"x")]
    assert scan_both(*EDGE_CASES["header key surrogate"]) == (
        Invalid, "record 0 has a header key that is not UTF-8")  # fmt: skip
    assert scan_both(*EDGE_CASES["offset delta wrong"]) == (
        Invalid, "record 1 has offset delta 2: inner offsets must be 0..n-1")  # fmt: skip
    assert decode_both(*EDGE_CASES["offset delta wrong"])[0] == "ok"  # gaps: the cleaner's
    assert scan_both(*EDGE_CASES["trailing byte"]) == (
        Invalid, "incorrect declared batch size: 1 bytes after record 0")  # fmt: skip


def test_timestamps_and_offsets_at_the_64_bit_edges() -> None:
    payload = record(5, ts_delta=10)
    assert decode_both(payload, 1, base_offset=INT64_MAX - 5)[0] == "ok"
    assert decode_both(payload, 1, base_offset=INT64_MAX - 4) == (
        Corrupt, "record 0: offset or timestamp out of range")  # fmt: skip
    assert decode_both(payload, 1, base_ts=INT64_MAX - 10)[0] == "ok"
    assert decode_both(payload, 1, base_ts=INT64_MAX - 9)[0] is Corrupt
    assert decode_both(payload, 1, base_ts=INT64_MAX - 9, ts_type=1)[0] is Corrupt
    # microseconds wrap as int64 arithmetic does (both sides)
    kind, cols = columns_both([(payload, 0, len(payload), 1, 0, 2**62, 0, 0)])
    assert kind == "ok"
    assert struct.unpack("=q", cols[2])[0] == ((2**62 + 10) * 1000 + 2**63) % 2**64 - 2**63
    assert scan_both(payload, 1) == (
        Invalid, "record 0 has offset delta 5: inner offsets must be 0..n-1")  # fmt: skip


def test_scan_bounds_and_lists() -> None:
    payload = b"".join(record(i, None if i % 3 == 0 else b"k", ts_delta=d)
                       for i, d in enumerate([0, 100, -100, 5, -1001, 7]))  # fmt: skip
    kind, (max_delta, bad, nulls, value_bytes) = scan_both(payload, 6, -50, 50, -1001, True)
    assert kind == "ok"
    assert (max_delta, bad, nulls, value_bytes) == (100, [1, 2], [0, 3], 6)
    kind, (_m, _b, nulls, _v) = scan_both(payload, 6, keys=False)
    assert nulls == []
    assert scan_both(b"", 0) == ("ok", (INT64_MIN, [], [], 0))


def test_columns_layout_and_filters() -> None:
    """Two segments (the second LogAppendTime), a range that cuts both, headers on and off."""
    first = record(0, b"a", b"1", headers=b"\x04" + header(b"h", b"x") + header(b"n", None))
    first += record(1, None, b"22") + record(2, b"c", None, ts_delta=3)
    second = record(0, b"d", b"", headers=b"\x00") + record(1, b"e", b"5", headers=b"\x02"
                                                                + header(b"", b""))  # fmt: skip
    segments = [(first, 0, len(first), 3, 10, 1000, 0, 0),
                (b"xx" + second, 2, 2 + len(second), 2, 13, 5, 1, 7777)]  # fmt: skip
    kind, cols = columns_both(segments, 11, 15)
    assert kind == "ok"
    c = records.Columns(*cols)
    assert c.rows == 4
    assert struct.unpack("=4q", c.offsets) == (11, 12, 13, 14)
    assert struct.unpack("=4q", c.timestamps) == (1_000_000, 1_003_000, 7_777_000, 7_777_000)
    assert struct.unpack("=4i", c.timestamp_types) == (0, 0, 1, 1)
    assert c.key_validity == bytes([0b1110]) and c.key_data == b"cde"
    assert struct.unpack("=5i", c.key_offsets) == (0, 0, 1, 2, 3)
    assert c.value_validity == bytes([0b1101]) and c.value_data == b"225"
    assert c.header_validity == bytes([0b1000])
    assert struct.unpack("=5i", c.header_offsets) == (0, 0, 0, 0, 1)
    assert c.header_key_data == b"" and struct.unpack("=2i", c.header_key_offsets) == (0, 0)
    assert c.header_value_validity is None and c.header_value_data == b""
    kind, cols = columns_both(segments, headers=False)
    assert kind == "ok" and len(cols) == 10 and cols[0] == 5
    assert columns_both([])[1][0] == 0


def test_env_switch_picks_the_fallback() -> None:
    code = "import strom.protocol.records as r; print(r.IMPLEMENTATION)"
    for env, expected in (({"STROM_NATIVE": "0"}, "python"), ({}, "native")):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env={**_base_env(), **env}, check=True)  # fmt: skip
        assert out.stdout.strip() == expected


def _base_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "STROM_NATIVE"}


def test_use_refuses_unknown_names() -> None:
    with pytest.raises(ValueError):
        records.use("rust")


def test_decode_calls_other_record_factories() -> None:
    """The native decode fills a slots class's fields directly; anything else is called."""
    payload = record(0, b"k", b"v", headers=b"\x02" + header(b"h", None)) + record(1, None, b"")

    def as_tuple(*fields: Any) -> tuple[Any, ...]:
        return fields

    for factory in (as_tuple, rb.Record, as_tuple):  # the class cache switches back and forth
        kind, decoded = same("decode", payload, 0, len(payload), 2, 5, 100, 0, 0, Corrupt,
                             factory)  # fmt: skip
        assert kind == "ok"
        fields = [d if isinstance(d, tuple) else (d.offset, d.timestamp, d.key, d.value,
                                                  d.headers) for d in decoded]  # fmt: skip
        assert fields == [(5, 100, b"k", b"v", [("h", None)]), (6, 100, None, b"", [])]
