"""Log append/read, segments, indexes, retention, delete-records, time lookups."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from strom.clock import FakeClock
from strom.protocol.record_batch import iter_batches, parse_header
from strom.storage.batch_validation import AppendOrigin
from strom.storage.errors import (
    CorruptRecordError,
    InvalidRecordError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    RecordValidationError,
    StorageError,
)
from strom.storage.log import Log
from strom.storage.log_config import LogConfig

from .conftest import batch, leader_log_and_batches, values

# the record walks run on the native codec and on its pure-Python fallback
pytestmark = pytest.mark.usefixtures("record_codec")

OpenLog = Callable[..., Log]


def fill(log: Log, clock: FakeClock, n: int) -> None:
    for i in range(n):
        r = log.append(batch(clock, b"a%d" % i, b"b%d" % i))
        assert (r.base_offset, r.last_offset, r.record_count) == (2 * i, 2 * i + 1, 2)


def test_append_read_across_segments(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log(segment_bytes=400, index_interval_bytes=100)
    fill(log, clock, 40)
    assert log.log_end_offset == 80
    assert len(log.segments) > 3
    got: list[tuple[int, bytes | None]] = []
    offset = 0
    while offset < log.log_end_offset:
        res = log.read(offset, 10_000)
        got += values(res.records)
        offset = got[-1][0] + 1
    assert got == [(i, (b"a%d" if i % 2 == 0 else b"b%d") % (i // 2)) for i in range(80)]
    assert [s.base_offset for s in log.segments] == sorted({s.base_offset for s in log.segments})


def test_read_mid_batch_and_max_bytes(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log(index_interval_bytes=0)
    fill(log, clock, 10)
    res = log.read(7, 1)  # mid-batch offset, max_bytes smaller than a batch
    assert res.first_offset == 6
    assert values(res.records) == [(6, b"a3"), (7, b"b3")]
    assert log.read(7, 1, min_one_batch=False).records == b""
    size = parse_header(res.records).size
    assert values(log.read(4, 2 * size).records) == [(4, b"a2"), (5, b"b2"), (6, b"a3"), (7, b"b3")]
    assert values(log.read(4, 10_000, max_offset=8).records)[-1] == (7, b"b3")
    assert log.read(8, 10_000, max_offset=8).records == b""
    end = log.read(20, 100)
    assert end.records == b"" and end.log_end_offset == 20
    with pytest.raises(OffsetOutOfRangeError):
        log.read(21, 100)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100)


def test_roll_by_size_and_time(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log(segment_bytes=250, segment_ms=1000)
    size = len(batch(clock, b"x"))
    log.append(batch(clock, b"x"))
    log.append(batch(clock, b"x"))
    assert len(log.segments) == 1 + (2 * size > 250)
    n = len(log.segments)
    clock.advance(1001)
    log.append(batch(clock, b"y"))
    assert len(log.segments) == n + 1
    assert log.segments[-1].base_offset == 2
    log.maybe_roll_by_time()
    assert len(log.segments) == n + 1
    clock.advance(1001)
    log.maybe_roll_by_time()
    assert len(log.segments) == n + 2 and log.segments[-1].base_offset == 3


def test_retention_by_time_and_size(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log(segment_bytes=100, retention_ms=10_000)
    for i in range(6):
        log.append(batch(clock, b"v%d" % i))
        clock.advance(3000)
    assert len(log.segments) == 6
    log.high_watermark = log.log_end_offset
    # segment i has max ts t0 + 3000 i; now = t0 + 18000 → segments 0..2 are > 10 s old
    assert log.enforce_retention() == 3
    assert log.log_start_offset == 3
    assert values(log.read(3, 10_000).records) == [(3, b"v3")]
    with pytest.raises(OffsetOutOfRangeError):
        log.read(2, 100)
    log.update_config(log.config.__class__(segment_bytes=100, retention_ms=-1, retention_bytes=1))
    assert log.enforce_retention() == 2  # never the active segment
    assert log.log_start_offset == 5 and len(log.segments) == 1


def test_retention_off_for_compact(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log(segment_bytes=100, retention_ms=0, cleanup_policy="compact")
    for i in range(3):
        log.append(batch(clock, b"v%d" % i))
    clock.advance(10)
    assert log.enforce_retention() == 0 and log.log_start_offset == 0


def test_delete_records_before_persists(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log(segment_bytes=200)
    for i in range(5):
        log.append(batch(clock, b"v%d" % i))
    log.high_watermark = 4
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records_before(5)
    assert log.delete_records_before(3) == 3
    assert log.segments[0].base_offset == 2  # the segment holding offset 3 stays
    with pytest.raises(OffsetOutOfRangeError):
        log.read(2, 100)
    log.close()
    log = open_log(segment_bytes=200)
    assert (log.log_start_offset, log.log_end_offset) == (3, 5)
    assert values(log.read(3, 10_000).records) == [(3, b"v3")]
    log.high_watermark = 5
    assert log.delete_records_before(5) == 5
    assert log.read(5, 100).records == b""
    assert log.append(batch(clock, b"next")).base_offset == 5


def test_time_index_lookups(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log(segment_bytes=300, index_interval_bytes=0)
    t0 = clock.time_ms()
    for i in range(10):
        log.append(batch(clock, b"v%d" % i, b"w%d" % i))
        clock.advance(100)
    assert log.offset_for_timestamp(t0) == (0, t0)
    assert log.offset_for_timestamp(t0 + 250) == (6, t0 + 300)
    assert log.offset_for_timestamp(t0 + 900) == (18, t0 + 900)
    assert log.offset_for_timestamp(t0 + 901) is None
    assert log.max_timestamp_offset() == (18, t0 + 900)
    log.close()
    log = open_log(segment_bytes=300, index_interval_bytes=0)
    assert log.offset_for_timestamp(t0 + 250) == (6, t0 + 300)
    assert log.max_timestamp_offset() == (18, t0 + 900)


def test_log_append_time(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log(message_timestamp_type="LogAppendTime")
    r = log.append(batch(clock, b"x", b"y"))
    assert r.log_append_time == clock.time_ms()
    h = parse_header(log.read(0, 1000).records)
    assert h.timestamp_type == 1 and h.max_timestamp == clock.time_ms()
    assert open_log().append(batch(clock, b"z")).log_append_time == -1


def test_invalid_input_leaves_log_unchanged(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log(max_message_bytes=200, message_timestamp_after_max_ms=1000)
    log.append(batch(clock, b"ok"))
    before = (log.log_end_offset, log.segments[0].size)
    good = batch(clock, b"fine")
    bad_crc = bytearray(batch(clock, b"bad"))
    bad_crc[-1] ^= 0xFF
    cases: list[tuple[bytes, type[StorageError], ErrorCode]] = [
        (bytes(bad_crc), CorruptRecordError, ErrorCode.corrupt_message),
        (good + good[:40], CorruptRecordError, ErrorCode.corrupt_message),
        (batch(clock, b"x" * 300), RecordTooLargeError, ErrorCode.message_too_large),
        (b"", InvalidRecordError, ErrorCode.invalid_record),
        (good + good, InvalidRecordError, ErrorCode.invalid_record),
        (_future(clock), RecordValidationError, ErrorCode.invalid_timestamp),
    ]
    for data, exc, code in cases:
        with pytest.raises(exc) as info:
            log.append(data)
        assert info.value.error_code == code
        assert (log.log_end_offset, log.segments[0].size) == before
    assert values(log.read(0, 10_000).records) == [(0, b"ok")]


def _future(clock: FakeClock) -> bytes:
    from strom.protocol.record_batch import build_batch

    return build_batch([(None, b"f", [], clock.time_ms() + 5000)])


def test_leader_epoch_stamped_and_one_batch_per_client_append(
    open_log: OpenLog, clock: FakeClock
) -> None:
    log = open_log()
    r = log.append(batch(clock, b"a", b"b"), leader_epoch=7)
    assert (r.base_offset, r.last_offset, r.record_count) == (0, 1, 2)
    with pytest.raises(InvalidRecordError):
        log.append(batch(clock, b"c") + batch(clock, b"d"), leader_epoch=7)
    # replication copies several batches at once and keeps their epochs
    log.append(batch(clock, b"c", base_offset=2, partition_leader_epoch=8)
               + batch(clock, b"d", base_offset=3, partition_leader_epoch=9),
               origin=AppendOrigin.REPLICATION)  # fmt: skip
    hs = [h for h, _ in iter_batches(log.read(0, 10_000).records)]
    assert [(h.base_offset, h.partition_leader_epoch) for h in hs] == [(0, 7), (2, 8), (3, 9)]


def test_append_without_assigning_offsets(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log()
    log.append(batch(clock, b"a", base_offset=10), origin=AppendOrigin.REPLICATION)
    assert log.log_end_offset == 11
    with pytest.raises(InvalidRecordError):
        log.append(batch(clock, b"b", base_offset=5), origin=AppendOrigin.REPLICATION)
    assert values(log.read(10, 1000).records) == [(10, b"a")]


def test_truncate_to(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log(segment_bytes=200)
    for i in range(6):
        log.append(batch(clock, b"v%d" % i))
    log.truncate_to(3)
    assert log.log_end_offset == 3
    assert log.append(batch(clock, b"new")).base_offset == 3
    assert values(log.read(0, 10_000).records) == [(0, b"v0"), (1, b"v1")]
    assert values(log.read(2, 10_000).records) == [(2, b"v2"), (3, b"new")]


def test_truncate_fully_and_start_at(open_log: OpenLog, clock: FakeClock) -> None:
    """A follower behind its leader's log start starts over there (Kafka's
    truncateFullyAndStartAt); it survives a reopen."""
    log = open_log(segment_bytes=200)
    for i in range(6):
        log.append(batch(clock, b"v%d" % i), leader_epoch=1)
    log.truncate_fully_and_start_at(40)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (40, 40, 40)
    assert log.leader_epochs.entries() == []
    log.append(batch(clock, b"x", base_offset=40, partition_leader_epoch=2),
               origin=AppendOrigin.REPLICATION)  # fmt: skip
    assert log.leader_epochs.entries() == [(2, 40)]
    log.close()
    again = Log.open(log.dir, log.config, clock)
    assert (again.log_start_offset, again.log_end_offset) == (40, 41)
    assert values(again.read(40, 10_000).records) == [(40, b"x")]
    again.close()


def test_flush_messages(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log(flush_messages=3)
    log.append(batch(clock, b"a", b"b"))
    assert log.recovery_point == 0
    log.append(batch(clock, b"c"))
    assert log.recovery_point == 3


def test_a_follower_copy_is_the_leaders_log_byte_for_byte(tmp_path: Path,
                                                          clock: FakeClock) -> None:  # fmt: skip
    """Leader and follower appends take one path: the same roll decisions (segment.bytes,
    index entries, time index) give the follower the leader's files, whatever the chunks the
    leader's bytes arrive in; aborted transactions and producer state follow too."""
    cfg = LogConfig(segment_bytes=700, index_interval_bytes=150)
    leader, chunks = leader_log_and_batches(tmp_path / "leader-0", cfg, clock)
    follower = Log.open(tmp_path / "follower-0", cfg, clock)
    for i in range(0, len(chunks), 4):  # fetches of up to four batches
        follower.append(b"".join(chunks[i : i + 4]), origin=AppendOrigin.REPLICATION)
    assert [s.base_offset for s in follower.segments] == [s.base_offset for s in leader.segments]
    assert len(leader.segments) > 3
    assert follower.leader_epochs.entries() == leader.leader_epochs.entries()
    assert follower.collect_aborted(0, 1 << 30) == leader.collect_aborted(0, 1 << 30)
    assert follower.producer_state.producers == leader.producer_state.producers
    leader.close()
    follower.close()
    for seg in leader.segments:
        for path in seg.file_paths():
            copy = tmp_path / "follower-0" / path.name
            assert copy.exists() == path.exists(), path.name
            if path.exists():
                assert copy.read_bytes() == path.read_bytes(), path.name


def test_a_refused_append_writes_nothing(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log()
    log.append(batch(clock, b"a"))
    good = batch(clock, b"b", base_offset=1)
    bad = bytearray(batch(clock, b"c", base_offset=2))
    bad[-1] ^= 0xFF  # CRC mismatch
    refusals: list[tuple[bytes, AppendOrigin, type[Exception]]] = [
        (b"", AppendOrigin.CLIENT, InvalidRecordError),  # no batch at all
        (good[:30], AppendOrigin.CLIENT, CorruptRecordError),  # a truncated header
        (good[:-1], AppendOrigin.CLIENT, CorruptRecordError),  # a truncated batch
        (good + good, AppendOrigin.CLIENT, InvalidRecordError),  # two batches
        (bytes(bad), AppendOrigin.CLIENT, CorruptRecordError),
        (good + bytes(bad), AppendOrigin.REPLICATION, CorruptRecordError),  # checked first
        (b"", AppendOrigin.REPLICATION, InvalidRecordError),
    ]
    for records, origin, error in refusals:
        with pytest.raises(error):
            log.append(records, origin=origin)
        assert (log.log_end_offset, log.active.size) == (1, len(batch(clock, b"a")))
    assert values(log.read(0, 10_000).records) == [(0, b"a")]
