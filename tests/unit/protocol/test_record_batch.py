"""Record batch v2 codec: header parse/patch, CRC, LogAppendTime, build/decode round trips."""

from __future__ import annotations

import struct

import pytest

from strom.protocol import record_batch as rb

# the record walks run on the native codec and on its pure-Python fallback
pytestmark = pytest.mark.usefixtures("record_codec")

TS = 1_700_000_000_000
RECORDS = [
    (b"k1", b"v1", [("h", b"x"), ("n", None)], TS),
    (None, b"value-without-key", [], TS + 5),
    (b"k3", None, [], TS - 3),
]


def test_build_parse_header() -> None:
    data = rb.build_batch(
        RECORDS, base_offset=100, producer_id=7, producer_epoch=2, base_sequence=10,
        is_transactional=True, partition_leader_epoch=4,
    )  # fmt: skip
    h = rb.parse_header(data)
    assert h.base_offset == 100
    assert h.size == len(data) == h.batch_length + 12
    assert h.magic == 2
    assert h.partition_leader_epoch == 4
    assert h.last_offset_delta == 2 and h.last_offset == 102 and h.next_offset == 103
    assert h.record_count == 3
    assert h.base_timestamp == TS and h.max_timestamp == TS + 5
    assert h.producer_id == 7 and h.producer_epoch == 2 and h.has_producer_id
    assert h.base_sequence == 10 and h.last_sequence == 12
    assert h.is_transactional and not h.is_control
    assert h.compression == 0 and h.timestamp_type == rb.CREATE_TIME
    assert rb.verify_crc(data)


def test_decode_round_trip() -> None:
    data = rb.build_batch(RECORDS, base_offset=5)
    recs = rb.decode_records(data)
    assert recs == [
        rb.Record(5, TS, b"k1", b"v1", [("h", b"x"), ("n", None)]),
        rb.Record(6, TS + 5, None, b"value-without-key", []),
        rb.Record(7, TS - 3, b"k3", None, []),
    ]


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_compressed_round_trip(codec: int) -> None:
    many = [(b"k%d" % i, b"v" * i, [], TS + i) for i in range(200)]
    data = rb.build_batch(many, compression=codec)
    h = rb.parse_header(data)
    assert h.compression == codec
    assert rb.verify_crc(data)
    recs = rb.decode_records(data)
    assert [(r.offset, r.key, r.value, r.timestamp) for r in recs] == [
        (i, b"k%d" % i, b"v" * i, TS + i) for i in range(200)
    ]


def test_crc_detects_flipped_byte() -> None:
    data = bytearray(rb.build_batch(RECORDS))
    assert rb.verify_crc(data)
    for pos in (21, 40, len(data) - 1):
        bad = bytearray(data)
        bad[pos] ^= 0x01
        assert not rb.verify_crc(bad)


def test_patches_keep_crc() -> None:
    data = bytearray(b"\x00" * 3 + rb.build_batch(RECORDS))
    rb.patch_base_offset(data, 3, 123456789)
    rb.patch_partition_leader_epoch(data, 3, 9)
    h = rb.parse_header(data, 3)
    assert h.base_offset == 123456789 and h.partition_leader_epoch == 9
    assert rb.verify_crc(data[3:])
    assert [r.offset for r in rb.decode_records(data[3:])] == [123456789, 123456790, 123456791]


def test_log_append_time_rewrite() -> None:
    data = bytearray(rb.build_batch(RECORDS))
    rb.set_log_append_time(data, 0, TS + 1000)
    h = rb.parse_header(data)
    assert h.timestamp_type == rb.LOG_APPEND_TIME and h.max_timestamp == TS + 1000
    assert rb.verify_crc(data)
    assert [r.timestamp for r in rb.decode_records(data)] == [TS + 1000] * 3


def test_iter_batches() -> None:
    a = rb.build_batch(RECORDS[:1], base_offset=0)
    b = rb.build_batch(RECORDS, base_offset=1)
    got = [(h.base_offset, bytes(v)) for h, v in rb.iter_batches(a + b)]
    assert got == [(0, a), (1, b)]
    assert list(rb.iter_batches(b"")) == []


def test_iter_batches_rejects_bad_input() -> None:
    a = rb.build_batch(RECORDS)
    with pytest.raises(rb.CorruptRecordError):
        list(rb.iter_batches(a[:-1]))
    with pytest.raises(rb.CorruptRecordError):
        list(rb.iter_batches(a + a[:30]))
    bad_magic = bytearray(a)
    bad_magic[16] = 1
    with pytest.raises(rb.CorruptRecordError):
        list(rb.iter_batches(bad_magic))
    short = bytearray(a)
    struct.pack_into(">i", short, 8, 10)
    with pytest.raises(rb.CorruptRecordError):
        list(rb.iter_batches(short))


def test_control_and_sequence_wrap() -> None:
    data = rb.build_batch(
        [(b"\x00\x00\x00\x01", b"\x00\x00", [], TS)] * 3,
        producer_id=1, producer_epoch=0, base_sequence=2**31 - 2, is_control=True,
        is_transactional=True,
    )  # fmt: skip
    h = rb.parse_header(data)
    assert h.is_control and h.last_sequence == 0


def test_varint_round_trip() -> None:
    for v in (0, 1, -1, 63, -64, 64, 300, -300, 2**31 - 1, -(2**31), 2**62, -(2**63)):
        enc = rb.encode_varint(v)
        assert rb.decode_varint(enc, 0) == (v, len(enc))
    with pytest.raises(rb.CorruptRecordError):
        rb.decode_varint(b"\x80\x80", 0)


def test_decode_rejects_corrupt_payload() -> None:
    data = bytearray(rb.build_batch(RECORDS))
    struct.pack_into(">i", data, 57, 5)  # claims more records than present
    with pytest.raises(rb.CorruptRecordError):
        rb.decode_records(data)
