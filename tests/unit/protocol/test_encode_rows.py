"""``records.encode_rows`` and ``records.murmur2``: Arrow key/value columns into record batches
per partition, the native codec against its pure-Python specification, and both against the
data (Kafka's murmur2 vectors, ``build_batch`` of the same rows, ``decode_records``, the CRC,
the batch-size rule).

The inputs are real pyarrow arrays (binary and string, with nulls, sliced); strom.protocol
itself never imports pyarrow, only the arrays' buffers cross.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strom.protocol import _records_py, records
from strom.protocol.batch_header import compute_crc, parse_header, verify_crc

try:
    from strom.protocol import _records_native as native
except ImportError:  # test_native_built fails; the native half of these tests skips
    native = None

needs_native = pytest.mark.skipif(native is None, reason="the native record codec is not built")
FAST = settings(max_examples=int(os.environ.get("STROM_CODEC_EXAMPLES", "150")), deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])  # fmt: skip
TS = 1_700_000_000_123

# Kafka's UtilsTest.testMurmur2 (clients/src/test/java/org/apache/kafka/common/utils/
# UtilsTest.java, checked against its text), plus the empty array (every length % 4 is covered).
KAFKA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.fixture
def impl(record_codec: str) -> str:
    """Each test once per codec (tests/unit/conftest.py's ``record_codec``)."""
    return record_codec


def buffers(arr: pa.Array) -> tuple[Any, ...]:
    """What the Spark sink passes: ``(*arr.buffers(), arr.offset, len(arr))``."""
    validity, offsets, data = arr.buffers()
    return validity, offsets, data, arr.offset, len(arr)


def outcome(fn: Callable[..., Any], *args: Any) -> tuple[Any, Any]:
    try:
        return "ok", fn(*args)
    except (ValueError, TypeError) as exc:
        return type(exc), str(exc)


def encode_both(*args: Any) -> tuple[Any, Any]:
    """``encode`` on both implementations (the native one when built): identical outcomes."""
    expected = outcome(_records_py.encode, *args, compute_crc)
    if native is not None:
        assert outcome(native.encode, *args, compute_crc) == expected
    return expected


def partition_of(key: bytes | None, partitions: int, null_key_partition: int) -> int:
    if key is None:
        return null_key_partition
    return (_records_py.murmur2(key) & 0x7FFFFFFF) % partitions  # Kafka's vectors check it


def check_against_build_batch(out: dict[int, list[bytes]], keys: list[bytes | None],
                              values: list[bytes | None], partitions: int, null_key: int,
                              max_batch_bytes: int) -> None:  # fmt: skip
    """``out`` holds every row once, in its partition, in row order, in batches that are
    ``build_batch`` of their rows, decode back and pass the CRC check, cut by the size rule."""
    expected: dict[int, list[tuple[bytes | None, bytes | None, list[Any], int]]] = {}
    for key, value in zip(keys, values, strict=True):
        partition = partition_of(key, partitions, null_key)
        expected.setdefault(partition, []).append((key, value, [], TS))
    assert list(out) == sorted(expected)
    for partition, rows in expected.items():
        start = 0
        batches = out[partition]
        for n, batch in enumerate(batches):
            assert verify_crc(batch)
            header = parse_header(batch)
            assert (header.base_offset, header.base_timestamp, header.max_timestamp) == (0, TS, TS)
            decoded = records.decode_records(batch)
            assert decoded, "a batch holds at least one record"
            mine = rows[start : start + len(decoded)]
            assert [(r.offset, r.key, r.value, r.timestamp, r.headers) for r in decoded] == [
                (i, k, v, TS, []) for i, (k, v, _h, _t) in enumerate(mine)
            ]
            assert batch == records.build_batch(mine)
            assert len(batch) <= max_batch_bytes or len(decoded) == 1
            start += len(decoded)
            if n + 1 < len(batches):  # cut only when the next record would not have fitted
                assert len(records.build_batch([*mine, rows[start]])) > max_batch_bytes
        assert start == len(rows)


# --- murmur2 -----------------------------------------------------------------------------------


def test_murmur2_gives_kafkas_values(impl: str) -> None:
    for data, expected in KAFKA_MURMUR2.items():
        assert records.murmur2(data) == expected
        assert records.murmur2(bytearray(data)) == expected
        assert records.murmur2(memoryview(b"xx" + data)[2:]) == expected
    assert records.murmur2(b"") == 275646681  # seed ^ 0, then only the final mix


@needs_native
@FAST
@given(st.binary(max_size=64))
def test_murmur2_alike(data: bytes) -> None:
    assert native is not None
    assert native.murmur2(data) == _records_py.murmur2(data)


def test_partitions_as_the_java_client(impl: str) -> None:
    """toPositive(murmur2("foobar")) % 50 (a value other Kafka ports pin too), and the null key."""
    keys = pa.array([b"foobar", None, b"21"])
    values = pa.array([b"a", b"b", b"c"])
    out = records.encode_rows(buffers(keys), buffers(values), 50, 7, TS, 1 << 20)
    assert sorted(out) == [7, 16, (-973932308 & 0x7FFFFFFF) % 50]
    assert [r.key for r in records.decode_records(out[16][0])] == [b"foobar"]
    assert [r.key for r in records.decode_records(out[7][0])] == [None]


def test_string_keys_hash_their_utf8_bytes(impl: str) -> None:
    """A string column is read as its UTF-8 bytes, what the Java client's StringSerializer
    hashes."""
    words = ["é", "\U0001f600", "straße", "", "abc"]
    keys, values = pa.array(words, pa.string()), pa.array(words[::-1], pa.string())
    out = records.encode_rows(buffers(keys), buffers(values), 5, 0, TS, 1 << 20)
    encoded = [w.encode() for w in words]
    check_against_build_batch(out, encoded, encoded[::-1], 5, 0, 1 << 20)  # type: ignore[arg-type]
    assert records.murmur2(b"abc") == KAFKA_MURMUR2[b"abc"]


# --- results -----------------------------------------------------------------------------------

optional = st.one_of(st.none(), st.binary(max_size=30), st.just(b""))


@st.composite
def row_sets(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(st.integers(0, 40))
    keys = draw(st.one_of(st.none(), st.lists(optional, min_size=n, max_size=n)))
    values = draw(st.lists(optional, min_size=n, max_size=n))
    as_text = draw(st.booleans())  # string arrays: same buffers, utf-8 data
    if as_text:
        keys = None if keys is None else [None if k is None else k.hex().encode() for k in keys]
        values = [None if v is None else v.hex().encode() for v in values]
    kind = pa.string() if as_text else pa.binary()
    # a slice of a longer array: non-zero array offset, bitmap and offsets not starting at 0
    before, after = draw(st.integers(0, 9)), draw(st.integers(0, 3))
    pad: list[bytes | None] = [b"p" * i if i % 3 else None for i in range(before + after)]

    def array(rows: list[bytes | None]) -> pa.Array:
        items = pad[:before] + rows + pad[before:]
        if as_text:
            return pa.array([None if x is None else x.decode() for x in items], kind)[before:][:n]
        return pa.array(items, kind)[before:][:n]

    partitions = draw(st.one_of(st.integers(1, 9), st.just(2**31 - 1), st.integers(1, 10**6)))
    return {
        "keys": keys, "values": values,
        "key_array": None if keys is None else array(keys), "value_array": array(values),
        "partitions": partitions,
        "null_key": draw(st.integers(0, partitions - 1)),
        "max_batch_bytes": draw(st.one_of(st.integers(-5, 400), st.just(1 << 20))),
    }  # fmt: skip


@FAST
@given(row_sets())
def test_generated_rows_encode_alike_and_right(rows: dict[str, Any]) -> None:
    keys = rows["keys"] if rows["keys"] is not None else [None] * len(rows["values"])
    key_buffers = None if rows["key_array"] is None else buffers(rows["key_array"])
    kind, out = encode_both(key_buffers, buffers(rows["value_array"]), rows["partitions"],
                            rows["null_key"], TS, rows["max_batch_bytes"])  # fmt: skip
    assert kind == "ok", out
    check_against_build_batch(out, keys, rows["values"], rows["partitions"], rows["null_key"],
                              rows["max_batch_bytes"])  # fmt: skip


def test_splits_and_a_record_larger_than_the_cap(impl: str) -> None:
    values = [b"v" * 50] * 10 + [b"x" * 1000] + [b"w" * 10] * 3
    cap = 61 + 3 * 57  # three 50-byte records (57 bytes each with its fields) per batch
    out = records.encode_rows(None, buffers(pa.array(values)), 4, 2, TS, cap)
    assert list(out) == [2]
    assert [len(records.decode_records(b)) for b in out[2]] == [3, 3, 3, 1, 1, 3]
    assert [len(b) for b in out[2]] == [cap, cap, cap, 61 + 57, 61 + 1009, 61 + 3 * 17]
    check_against_build_batch(out, [None] * len(values), values, 4, 2, cap)


@pytest.mark.parametrize("partitions", [8, 10**6])
def test_many_rows_many_partitions(impl: str, partitions: int) -> None:
    """Enough rows for several batches per partition, keys spread over the partitions; with
    10**6 partitions (more than the rows) the native codec ranks the partitions present
    instead of counting over all of them."""
    n = 5000
    keys: list[bytes | None] = [i.to_bytes(8, "little") for i in range(n)]
    keys[::7] = [None] * len(keys[::7])
    values: list[bytes | None] = [bytes([i % 251]) * (i % 150) for i in range(n)]
    cap = 16_384 if partitions == 8 else 200
    out = records.encode_rows(buffers(pa.array(keys)), buffers(pa.array(values)), partitions, 3,
                              TS, cap)  # fmt: skip
    if partitions == 8:
        assert len(out) == 8 and all(len(batches) > 1 for batches in out.values())
    else:
        assert len(out) > 4000 and len(out[3]) > 1
    check_against_build_batch(out, keys, values, partitions, 3, cap)


def test_empty_and_all_null_columns(impl: str) -> None:
    assert records.encode_rows(None, buffers(pa.array([], pa.binary())), 3, 0, TS, 100) == {}
    nulls = pa.array([None, None], pa.binary())
    out = records.encode_rows(buffers(nulls), buffers(nulls), 3, 1, TS, 1 << 20)
    assert [(r.key, r.value) for r in records.decode_records(out[1][0])] == [(None, None)] * 2
    # a None data buffer (an array of nulls may have none) reads as no bytes
    out = records.encode_rows(None, (None, bytes(12), None, 0, 2), 1, 0, TS, 1 << 20)
    assert [r.value for r in records.decode_records(out[0][0])] == [b"", b""]


# --- bad arguments -----------------------------------------------------------------------------

GOOD = (None, struct.pack("<3i", 0, 1, 3), b"abc", 0, 2)


def bad_argument_cases() -> list[tuple[tuple[Any, ...], type[Exception], str]]:
    off = struct.pack
    return [
        ((None, GOOD, 0, 0, TS, 100), ValueError, "partitions 0 outside [1, 2147483647]"),
        ((None, GOOD, 2**31, 0, TS, 100), ValueError,
         "partitions 2147483648 outside [1, 2147483647]"),
        ((None, GOOD, 2**70, 0, TS, 100), ValueError, f"partitions {2**70} outside [1, 2147483647]"),
        ((None, GOOD, "3", 0, TS, 100), TypeError, "'str' object cannot be interpreted as an integer"),
        ((None, GOOD, 3, 3, TS, 100), ValueError, "null_key_partition 3 outside [0, 3)"),
        ((None, GOOD, 3, -(2**64), TS, 100), ValueError,
         f"null_key_partition {-(2**64)} outside [0, 3)"),
        ((None, GOOD, 3, -1, TS, 100), ValueError, "null_key_partition -1 outside [0, 3)"),
        ((None, GOOD, 3, 0, 2**63, 100), ValueError, f"timestamp_ms {2**63} outside 64 bits"),
        ((None, GOOD, 3, 0, TS, -(2**63) - 1), ValueError,
         f"max_batch_bytes {-(2**63) - 1} outside 64 bits"),
        ((None, GOOD[:4], 3, 0, TS, 100), TypeError,
         "values must be a tuple (validity, offsets, data, offset, length)"),
        (([1, 2, 3, 4, 5], GOOD, 3, 0, TS, 100), TypeError,
         "keys must be a tuple (validity, offsets, data, offset, length)"),
        (((None, GOOD[1], b"abc", -1, 2), GOOD, 3, 0, TS, 100), ValueError,
         "keys: array offset -1 and length 2 must be in [0, 2**60]"),
        ((None, (None, GOOD[1], b"abc", 0, -2), 3, 0, TS, 100), ValueError,
         "values: array offset 0 and length -2 must be in [0, 2**60]"),
        ((None, (None, GOOD[1], b"abc", 2**70, 2), 3, 0, TS, 100), ValueError,
         f"values: array offset {2**70} and length 2 must be in [0, 2**60]"),
        ((None, (None, GOOD[1], b"abc", 0, 2**60 + 1), 3, 0, TS, 100), ValueError,
         f"values: array offset 0 and length {2**60 + 1} must be in [0, 2**60]"),
        ((None, (None, GOOD[1], b"abc", 2**60, 2**60), 3, 0, TS, 100), ValueError,
         f"values: an offsets buffer of 12 bytes is too short for {2**61 + 1} offsets"),
        ((GOOD[:4] + (1,), GOOD, 3, 0, TS, 100), ValueError, "1 keys for 2 values"),
        ((None, (b"\xff", GOOD[1], b"abc", 7, 2), 3, 0, TS, 100), ValueError,
         "values: a validity bitmap of 1 bytes is too short for 9 rows"),
        ((None, (None, off("<2i", 0, 1), b"abc", 0, 2), 3, 0, TS, 100), ValueError,
         "values: an offsets buffer of 8 bytes is too short for 3 offsets"),
        ((None, (None, GOOD[1], b"abc", 1, 2), 3, 0, TS, 100), ValueError,
         "values: an offsets buffer of 12 bytes is too short for 4 offsets"),
        (((None, off("<3i", -4, 1, 3), b"abc", 0, 2), GOOD, 3, 0, TS, 100), ValueError,
         "keys: offset 0 is negative (-4)"),
        ((None, (None, off("<3i", 0, 3, 1), b"abc", 0, 2), 3, 0, TS, 100), ValueError,
         "values: offsets decrease at 2 (3, then 1)"),
        ((None, (None, off("<3i", 0, 1, 4), b"abc", 0, 2), 3, 0, TS, 100), ValueError,
         "values: offset 2 points past the data (4 > 3 bytes)"),
        ((None, (None, off("<4i", 9, 0, 1, 3), b"abc", 1, 2), 3, 0, TS, 100), "ok", ""),
    ]


@pytest.mark.parametrize("case", range(len(bad_argument_cases())))
def test_bad_arguments_answer_one_line(case: int) -> None:
    args, error, message = bad_argument_cases()[case]
    kind, result = encode_both(*args)
    if error == "ok":  # an offset before the array's own is not read
        assert kind == "ok" and list(result) == [0]
        return
    assert (kind, result) == (error, message)
    assert "\n" not in message


def test_only_buffers_are_read() -> None:
    """An int is not a buffer (``bytes(5)`` would be five zero bytes): both refuse it."""
    for fn in (_records_py.murmur2, native.murmur2 if native is not None else None):
        if fn is not None:
            with pytest.raises(TypeError):
                fn(5)  # type: ignore[arg-type]
    for encode in (_records_py.encode, native.encode if native is not None else None):
        if encode is not None:
            with pytest.raises(TypeError):
                encode(None, (None, 12, b"abc", 0, 2), 3, 0, TS, 100, compute_crc)
            with pytest.raises(TypeError):
                encode(None, (4, GOOD[1], b"abc", 0, 2), 3, 0, TS, 100, compute_crc)


def test_a_failing_crc_function_fails_the_call() -> None:
    def broken(batch: Any) -> int:
        raise ValueError("no crc today")

    for encode in (_records_py.encode, native.encode if native is not None else None):
        if encode is not None:
            with pytest.raises(ValueError, match="no crc today"):
                encode(None, GOOD, 3, 0, TS, 100, broken)


@FAST
@given(st.binary(max_size=40), st.binary(max_size=20), st.one_of(st.none(), st.binary(max_size=3)),
       st.integers(-2, 12), st.integers(-2, 12), st.integers(-5, 300))  # fmt: skip
def test_random_buffers_answer_alike(offsets: bytes, data: bytes, validity: bytes | None,
                                     offset: int, length: int, cap: int) -> None:  # fmt: skip
    """Arbitrary offsets buffers: the same batches or the same one-line error, never a crash or
    a read outside the buffers (the native codec checks them before reading)."""
    column = (validity, offsets, data, offset, length)
    encode_both(column, column, 5, 0, TS, cap)
    encode_both(None, column, 5, 0, TS, cap)
