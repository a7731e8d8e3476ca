"""Validation per append origin (issue 13 items 2-3): what a client may write, what replication
keeps, per-record errors (KIP-467), the decompressed-size bound, the record walk."""

from __future__ import annotations

import struct
from collections.abc import Callable

import pytest
from kio.schema.errors import ErrorCode

from strom.clock import FakeClock
from strom.protocol import compression
from strom.protocol import record_batch as rb
from strom.protocol.batch_header import HEADER_STRUCT
from strom.protocol.records import scan_records
from strom.storage.batch_validation import AppendOrigin
from strom.storage.errors import (
    CorruptRecordError,
    InvalidRecordError,
    RecordValidationError,
    StorageError,
)
from strom.storage.log import Log

from .conftest import values

OpenLog = Callable[..., Log]
pytestmark = pytest.mark.usefixtures("record_codec")
HOUR = 3_600_000


def recs(clock: FakeClock, *items: tuple[bytes | None, int]) -> list[tuple]:
    return [(key, b"v%d" % i, [], clock.time_ms() + dt) for i, (key, dt) in enumerate(items)]


def with_payload(payload: bytes, count: int, *, codec: int = 0, ts: int = 0) -> bytes:
    """A batch with a hand-made (possibly malformed) records section and a valid CRC."""
    body = compression.compress(codec, payload)
    out = bytearray(rb.HEADER_SIZE)
    HEADER_STRUCT.pack_into(
        out, 0, 0, rb.HEADER_SIZE - rb.LOG_OVERHEAD + len(body), -1, 2, 0, codec,
        count - 1, ts, ts, -1, -1, -1, count,
    )  # fmt: skip
    out += body
    struct.pack_into(">I", out, 17, rb.compute_crc(out))
    return bytes(out)


def record_bytes(offset_delta: int, key: bytes | None = b"k", *, ts_delta: int = 0,
                 headers: bytes = b"\x00") -> bytes:  # fmt: skip
    body = b"\x00" + rb.encode_varint(ts_delta) + rb.encode_varint(offset_delta)
    body += rb.encode_varint(-1) if key is None else rb.encode_varint(len(key)) + key
    body += rb.encode_varint(1) + b"v" + headers
    return rb.encode_varint(len(body)) + body


def refused(log: Log, data: bytes, code: ErrorCode, **kw: object) -> StorageError:
    before = (log.log_end_offset, log.active.size)
    with pytest.raises(StorageError) as info:
        log.append(data, **kw)  # type: ignore[arg-type]
    assert info.value.error_code == code, info.value
    assert (log.log_end_offset, log.active.size) == before
    return info.value


def test_client_batch_shape_rules(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log()
    ok = rb.build_batch(recs(clock, (b"a", 0)))
    refused(log, ok + ok, ErrorCode.invalid_record)  # several batches in one produce
    refused(log, rb.build_batch(recs(clock, (b"a", 0)), base_offset=5), ErrorCode.invalid_record)
    control = rb.build_batch([(b"\x00\x00\x00\x00", b"\x00" * 6, [], clock.time_ms())],
                             producer_id=3, producer_epoch=0, is_transactional=True,
                             is_control=True)  # fmt: skip
    err = refused(log, control, ErrorCode.invalid_record)
    assert "control" in str(err)
    no_seq = rb.build_batch(recs(clock, (b"a", 0)), producer_id=3, producer_epoch=0)
    refused(log, no_seq, ErrorCode.invalid_record)
    # the coordinator may write control batches (transaction markers)
    assert log.append(control, origin=AppendOrigin.COORDINATOR).base_offset == 0
    assert log.append(ok).base_offset == 1


def test_records_are_walked(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log()
    ts = clock.time_ms()
    good = record_bytes(0) + record_bytes(1)
    assert log.append(with_payload(good, 2, ts=ts)).last_offset == 1
    cases = {
        "offset deltas not 0..n-1": with_payload(record_bytes(0) + record_bytes(2), 2, ts=ts),
        "count says 3, 2 records": with_payload(good, 3, ts=ts),
        "count says 1, 2 records": with_payload(good, 1, ts=ts),
        "trailing garbage": with_payload(good + b"\x07", 2, ts=ts),
        "length past the end": with_payload(good[:-1], 2, ts=ts),
        "varint of 11 bytes": with_payload(b"\xff" * 11, 1, ts=ts),
        "null header key": with_payload(record_bytes(0, headers=b"\x02\x01\x00"), 1, ts=ts),
        "negative header count": with_payload(record_bytes(0, headers=b"\x01"), 1, ts=ts),
        "length too small": with_payload(b"\x02\x00", 1, ts=ts),
    }
    for name, data in cases.items():
        err = refused(log, data, ErrorCode.invalid_record)
        assert not isinstance(err, RecordValidationError), name
    # the same malformed records, compressed
    refused(log, with_payload(record_bytes(0) + record_bytes(5), 2, codec=compression.LZ4,
                              ts=ts), ErrorCode.invalid_record)  # fmt: skip
    refused(log, with_payload(good, 2, ts=ts)[:-3] + b"\xff\xff\xff", ErrorCode.corrupt_message)
    # compressed garbage with a valid CRC
    refused(log, with_payload(b"garbage", 1, codec=compression.ZSTD, ts=ts)[: rb.HEADER_SIZE]
            + b"not zstd at all", ErrorCode.corrupt_message)  # fmt: skip
    assert values(log.read(0, 10_000).records) == [(0, b"v"), (1, b"v")]


def test_compression_bomb_is_bounded(open_log: OpenLog, clock: FakeClock,
                                     monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    from strom.storage import batch_validation

    monkeypatch.setattr(batch_validation, "MAX_UNCOMPRESSED_BATCH_BYTES", 1 << 20)
    log = open_log()
    value = b"\x00" * (2 << 20)  # 2 MiB of zeros: a few KB compressed
    for codec in (compression.GZIP, compression.SNAPPY, compression.LZ4, compression.ZSTD):
        bomb = rb.build_batch([(b"k", value, [], clock.time_ms())], compression=codec)
        assert len(bomb) < 120_000
        err = refused(log, bomb, ErrorCode.invalid_record)
        assert "more than" in str(err)
        small = rb.build_batch([(b"k", b"\x00" * 1000, [], clock.time_ms())], compression=codec)
        log.append(small)
    assert log.log_end_offset == 4


def test_per_record_errors(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log(cleanup_policy="compact", message_timestamp_before_max_ms=HOUR,
                   message_timestamp_after_max_ms=HOUR)  # fmt: skip
    batch = rb.build_batch(recs(clock, (b"a", 0), (None, 0), (b"c", 0), (None, 0)))
    err = refused(log, batch, ErrorCode.invalid_record)
    assert isinstance(err, RecordValidationError)
    assert [i for i, _m in err.record_errors] == [1, 3]
    assert "2 record errors" in str(err)
    # a timestamp error anywhere makes the whole answer INVALID_TIMESTAMP
    batch = rb.build_batch(recs(clock, (b"a", 0), (b"b", 2 * HOUR), (None, 0), (b"d", -2 * HOUR)))
    err = refused(log, batch, ErrorCode.invalid_timestamp)
    assert isinstance(err, RecordValidationError)
    assert [i for i, _m in err.record_errors] == [1, 2, 3]
    assert "out of range" in dict(err.record_errors)[1]
    assert log.append(rb.build_batch(recs(clock, (b"a", HOUR), (b"b", -HOUR)))).record_count == 2
    # LogAppendTime topics do not check timestamps; a client must not send LogAppendTime
    lat = open_log(message_timestamp_type="LogAppendTime")
    assert lat.append(rb.build_batch(recs(clock, (b"a", -100 * HOUR)))).log_append_time >= 0
    refused(lat, rb.build_batch(recs(clock, (b"a", 0)), timestamp_type=rb.LOG_APPEND_TIME),
            ErrorCode.invalid_timestamp)  # fmt: skip


def test_deprecated_difference_max_ms_bounds_both_sides(open_log: OpenLog,
                                                        clock: FakeClock) -> None:  # fmt: skip
    log = open_log(message_timestamp_difference_max_ms=HOUR)
    refused(log, rb.build_batch(recs(clock, (b"a", 2 * HOUR))), ErrorCode.invalid_timestamp)
    refused(log, rb.build_batch(recs(clock, (b"a", -2 * HOUR))), ErrorCode.invalid_timestamp)
    log.append(rb.build_batch(recs(clock, (b"a", HOUR // 2))))
    # an explicit before/after bound wins over it
    wide = open_log(message_timestamp_difference_max_ms=HOUR,
                    message_timestamp_after_max_ms=3 * HOUR)  # fmt: skip
    wide.append(rb.build_batch(recs(clock, (b"a", 2 * HOUR))))


def test_max_timestamp_taken_from_the_records(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log()
    data = bytearray(rb.build_batch(recs(clock, (b"a", 0), (b"b", 70))))
    struct.pack_into(">q", data, 35, clock.time_ms() + 5)  # the client's header lies
    struct.pack_into(">I", data, 17, rb.compute_crc(data))
    log.append(bytes(data))
    header = rb.parse_header(log.read(0, 10_000).records)
    assert header.max_timestamp == clock.time_ms() + 70
    assert rb.verify_crc(log.read(0, 10_000).records)


def test_replication_keeps_what_the_leader_wrote(open_log: OpenLog, clock: FakeClock) -> None:
    """Empty batches (left by compaction), gaps, control batches, several batches: kept."""
    log = open_log()
    empty = rb.build_batch_from_records([], base_offset=0, last_offset_delta=4, producer_id=7,
                                        producer_epoch=0, base_sequence=0)  # fmt: skip
    gap = rb.build_batch_from_records(
        [rb.Record(6, clock.time_ms(), b"k", b"x")], base_offset=5, last_offset_delta=2
    )
    marker = rb.build_batch([(b"\x00\x00\x00\x01", b"\x00" * 6, [], clock.time_ms())],
                            base_offset=8, producer_id=7, producer_epoch=0,
                            is_transactional=True, is_control=True)  # fmt: skip
    log.append(empty + gap + marker, origin=AppendOrigin.REPLICATION)
    assert log.log_end_offset == 9
    hs = [h for h, _ in rb.iter_batches(log.read(0, 10_000).records)]
    assert [(h.base_offset, h.record_count) for h in hs] == [(0, 0), (5, 1), (8, 1)]
    with pytest.raises(InvalidRecordError):  # a client may not write an empty batch
        log.append(rb.build_batch_from_records([], base_offset=0, last_offset_delta=0))
    with pytest.raises(CorruptRecordError):  # the CRC is checked for every origin
        bad = bytearray(gap)
        bad[-1] ^= 1
        log.append(bytes(bad), origin=AppendOrigin.REPLICATION)


def test_scan_reports_indexes_and_max_delta() -> None:
    data = rb.build_batch([(b"a", b"1", [("h", b"x")], 1000), (None, b"2", [], 1500),
                           (b"c", None, [], 900)])  # fmt: skip
    scan = scan_records(memoryview(data)[rb.HEADER_SIZE:], 3, -50, 100, -1001, True)
    assert scan.null_keys == [1]
    assert scan.bad_timestamps == [1, 2]
    assert scan.max_timestamp_delta == 500


def test_header_key_must_be_utf8(open_log: OpenLog, clock: FakeClock) -> None:
    """Header keys are strings; the cleaner decodes them, so bytes that are not UTF-8 are
    refused at the door instead of breaking compaction later."""
    log = open_log()
    bad = with_payload(record_bytes(0, headers=b"\x02\x02\xce\x00"), 1, ts=clock.time_ms())
    refused(log, bad, ErrorCode.invalid_record)
    good = with_payload(record_bytes(0, headers=b"\x02\x04\xc3\xa9\x00"), 1, ts=clock.time_ms())
    assert log.append(good).base_offset == 0


def test_timestamp_deltas_of_every_varint_width() -> None:
    """One-, two- and three-byte zigzag timestamp deltas (the scan inlines the first two)."""
    base = 1_700_000_000_000
    deltas = [0, 63, -64, 64, -65, 8191, -8192, 8192, -8193, 1_000_000, -1_000_000]
    data = rb.build_batch([(b"k", b"v", [], base + d) for d in [0, *deltas]])
    scan = scan_records(memoryview(data)[rb.HEADER_SIZE:], len(deltas) + 1, -8192, 8191,
                        -1 - base, False)  # fmt: skip
    assert scan.max_timestamp_delta == 1_000_000
    assert scan.bad_timestamps == [i + 1 for i, d in enumerate(deltas) if not -8192 <= d <= 8191]
