"""Log compaction (strom.storage.cleaner) with a FakeClock."""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from strom.clock import FakeClock
from strom.protocol import record_batch as rb
from strom.storage import cleaner
from strom.storage.batch_validation import AppendOrigin
from strom.storage.errors import RecordValidationError
from strom.storage.log import Log
from strom.storage.log_config import LogConfig

# the record walks run on the native codec and on its pure-Python fallback
pytestmark = pytest.mark.usefixtures("record_codec")

OpenLog = Callable[..., Log]

COMPACT = {"cleanup_policy": "compact", "min_cleanable_dirty_ratio": 0.0}


def put(log: Log, clock: FakeClock, *kvs: tuple[bytes | None, bytes | None], **kw: object) -> None:
    log.append(rb.build_batch([(k, v, [], clock.time_ms()) for k, v in kvs], **kw))  # type: ignore[arg-type]
    log.high_watermark = log.log_end_offset  # what the replica manager does once acknowledged


def read_all(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    out: list[tuple[int, bytes | None, bytes | None]] = []
    for seg in log.segments:
        for _h, data in seg.batches():
            out += [(r.offset, r.key, r.value) for r in rb.decode_records(data)]
    return out


def latest(rows: list[tuple[int, bytes | None, bytes | None]]) -> dict[bytes | None, bytes | None]:
    return {k: v for _o, k, v in rows}


def headers(log: Log) -> list[rb.BatchHeader]:
    return [h for seg in log.segments for _p, h in seg.iter_headers()]


def updates(log: Log, clock: FakeClock, rounds: int, keys: int = 5) -> None:
    for r in range(rounds):
        for k in range(keys):
            put(log, clock, (b"k%d" % k, b"v%d-%d" % (k, r)))
            clock.advance(1)


def test_keeps_latest_value_per_key_and_offsets(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log(segment_bytes=300, **COMPACT)
    updates(log, clock, 10)
    before = read_all(log)
    leo = log.log_end_offset
    active = log.segments[-1]
    res = cleaner.clean_log(log, None, clock.time_ms())
    assert res is not None and res.groups
    after = read_all(log)
    assert log.log_end_offset == leo
    assert latest(after) == latest(before)
    offsets = [o for o, _k, _v in after]
    assert offsets == sorted(set(offsets))
    assert set(offsets) <= {o for o, _k, _v in before}
    # everything below the active segment holds each key at most once
    cleaned = [k for o, k, _v in after if o < active.base_offset]
    assert len(cleaned) == len(set(cleaned))
    assert len(after) < len(before)
    assert log.segments[-1] is active  # active segment untouched
    assert log.read(0, 10_000).records  # reads still work (gaps are fine)
    # reopening gives the same log
    log.close()
    again = Log.open(log.dir, log.config, clock)
    assert read_all(again) == after
    assert again.log_end_offset == leo


def test_active_segment_never_cleaned(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log(**COMPACT)  # one big segment: everything is in the active one
    updates(log, clock, 5)
    assert cleaner.clean_log(log, None, clock.time_ms(), force=True) is None
    assert len(read_all(log)) == 25


def test_tombstones_kept_until_delete_retention(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log(segment_bytes=300, delete_retention_ms=10_000, **COMPACT)
    updates(log, clock, 3)
    put(log, clock, (b"k1", None))
    put(log, clock, (b"k2", None))
    updates(log, clock, 1, keys=1)  # k0 again
    log.roll()
    cleaner.clean_log(log, None, clock.time_ms())
    got = latest(read_all(log))
    assert b"k1" in got and got[b"k1"] is None  # tombstone still there
    assert got[b"k2"] is None
    clock.advance(10_001)
    put(log, clock, (b"k0", b"new"))
    log.roll()
    cleaner.clean_log(log, None, clock.time_ms(), force=True)
    got = latest(read_all(log))
    assert b"k1" not in got and b"k2" not in got
    assert got[b"k0"] == b"new" and got[b"k3"] == b"v3-2"


def test_min_compaction_lag(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log(segment_bytes=300, min_compaction_lag_ms=60_000, **COMPACT)
    updates(log, clock, 10)
    log.roll()
    n = len(read_all(log))
    assert cleaner.clean_log(log, None, clock.time_ms(), force=True) is None
    assert len(read_all(log)) == n
    clock.advance(60_001)
    assert cleaner.clean_log(log, None, clock.time_ms()) is not None
    assert len(read_all(log)) == 5


def test_dirty_ratio_respected(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log(segment_bytes=300, cleanup_policy="compact", min_cleanable_dirty_ratio=0.5)
    updates(log, clock, 10)
    log.roll()
    res = cleaner.clean_log(log, None, clock.time_ms())
    assert res is not None
    first_dirty = res.first_uncleanable
    # a little new dirty data: ratio below 0.5, no cleaning
    put(log, clock, (b"k0", b"x"))
    log.roll()
    p = cleaner.plan(log, first_dirty, clock.time_ms())
    assert p is not None and 0 < p.dirty_ratio < 0.5 and not p.should_clean()
    assert cleaner.clean_log(log, first_dirty, clock.time_ms()) is None
    # lots of new dirty data: cleaned
    updates(log, clock, 10)
    log.roll()
    p = cleaner.plan(log, first_dirty, clock.time_ms())
    assert p is not None and p.dirty_ratio > 0.5
    assert cleaner.clean_log(log, first_dirty, clock.time_ms()) is not None
    assert len([r for r in read_all(log)]) == 5


def test_max_compaction_lag_forces_cleaning(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log(segment_bytes=300, cleanup_policy="compact", min_cleanable_dirty_ratio=1.0,
                   max_compaction_lag_ms=1000)  # fmt: skip
    updates(log, clock, 10)
    log.roll()
    p = cleaner.plan(log, None, clock.time_ms())
    assert p is not None and not p.should_clean()
    clock.advance(2000)
    p = cleaner.plan(log, None, clock.time_ms())
    assert p is not None and p.forced and p.should_clean()


def test_compressed_batches(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log(segment_bytes=400, **COMPACT)
    for r in range(6):
        put(log, clock, *[(b"k%d" % k, b"v%d-%d" % (k, r)) for k in range(4)], compression=1)
    log.roll()
    cleaner.clean_log(log, None, clock.time_ms())
    rows = read_all(log)
    assert latest(rows) == {b"k%d" % k: b"v%d-5" % k for k in range(4)}
    assert len(rows) == 4
    assert all(h.compression == 1 for h in headers(log))
    for seg in log.segments:
        for _h, data in seg.batches():
            assert rb.verify_crc(data)


def test_null_keys_and_producer_fields_kept(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log(segment_bytes=300, **COMPACT)
    put(log, clock, (b"a", b"1"), (b"b", b"1"), producer_id=7, producer_epoch=0, base_sequence=0)
    log.update_config(LogConfig(segment_bytes=300))  # written before the topic was compacted
    put(log, clock, (None, b"nokey"))
    log.update_config(LogConfig(segment_bytes=300, **COMPACT))  # type: ignore[arg-type]
    put(log, clock, (b"a", b"2"), (b"b", b"2"), producer_id=7, producer_epoch=0, base_sequence=2)
    put(log, clock, (b"a", b"3"))
    log.roll()
    cleaner.clean_log(log, None, clock.time_ms())
    rows = read_all(log)
    assert (None, b"nokey") in [(k, v) for _o, k, v in rows]
    assert latest(rows)[b"a"] == b"3" and latest(rows)[b"b"] == b"2"
    pid_batches = [h for h in headers(log) if h.producer_id == 7]
    # pid 7's last batch stays, with its fields and offset range (records partly removed)
    last = pid_batches[-1]
    assert (last.base_offset, last.last_offset, last.base_sequence, last.producer_epoch) == (
        3, 4, 2, 0)  # fmt: skip
    assert last.record_count == 1


def test_producer_last_batch_kept_empty(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log(segment_bytes=300, **COMPACT)
    put(log, clock, (b"a", b"1"), producer_id=9, producer_epoch=1, base_sequence=0)
    put(log, clock, (b"a", b"2"))
    log.roll()
    cleaner.clean_log(log, None, clock.time_ms())
    hs = [h for h in headers(log) if h.producer_id == 9]
    assert len(hs) == 1 and hs[0].record_count == 0 and hs[0].last_offset == 0
    log.close()
    again = Log.open(log.dir, log.config, clock)
    assert latest(read_all(again)) == {b"a": b"2"}


def _marker(clock: FakeClock, pid: int, commit: bool) -> bytes:
    key = struct.pack(">hh", 0, 1 if commit else 0)
    value = struct.pack(">hi", 0, 0)
    return rb.build_batch([(key, value, [], clock.time_ms())], producer_id=pid, producer_epoch=0,
                          is_transactional=True, is_control=True)  # fmt: skip


def test_transactions_aborted_dropped_open_not_cleaned(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log(segment_bytes=300, **COMPACT)
    put(log, clock, (b"a", b"committed"))
    put(log, clock, (b"a", b"aborted"), producer_id=5, producer_epoch=0, base_sequence=0,
        is_transactional=True)  # fmt: skip
    log.append(_marker(clock, 5, commit=False), origin=AppendOrigin.COORDINATOR)
    log.high_watermark = log.log_end_offset
    put(log, clock, (b"b", b"1"))
    log.roll()
    put(log, clock, (b"b", b"open"), producer_id=6, producer_epoch=0, base_sequence=0,
        is_transactional=True)  # fmt: skip
    log.roll()
    put(log, clock, (b"b", b"2"))
    log.roll()
    res = cleaner.clean_log(log, None, clock.time_ms(), force=True)
    assert res is not None
    rows = read_all(log)
    values = [(k, v) for _o, k, v in rows]
    assert (b"a", b"committed") in values and (b"a", b"aborted") not in values
    # the open transaction stops the cleaning: it and later data are untouched
    assert (b"b", b"1") in values and (b"b", b"open") in values and (b"b", b"2") in values
    assert any(h.is_control for h in headers(log))  # the marker stays


def test_crash_before_swap_leaves_old_log(tmp_path: Path, clock: FakeClock) -> None:
    cfg = LogConfig(segment_bytes=300, cleanup_policy="compact", min_cleanable_dirty_ratio=0.0)
    log = Log.open(tmp_path / "t-0", cfg, clock)
    updates(log, clock, 10)
    log.roll()
    before = read_all(log)
    p = cleaner.plan(log, None, clock.time_ms())
    assert p is not None
    res = cleaner.clean(p, clock.time_ms())  # .cleaned files written, never swapped
    for g in res.groups:
        g.new.flush()
    assert list(log.dir.glob("*.cleaned"))
    # "crash": reopen without closing
    again = Log.open(log.dir, cfg, clock)
    assert not list(again.dir.glob("*.cleaned"))
    assert read_all(again) == before


def test_crash_mid_swap_completes(tmp_path: Path, clock: FakeClock) -> None:
    cfg = LogConfig(segment_bytes=300, cleanup_policy="compact", min_cleanable_dirty_ratio=0.0)
    log = Log.open(tmp_path / "t-0", cfg, clock)
    updates(log, clock, 10)
    log.roll()
    before = read_all(log)
    p = cleaner.plan(log, None, clock.time_ms())
    assert p is not None
    res = cleaner.clean(p, clock.time_ms())
    g = res.groups[0]
    # replace_segments up to the commit point: the .swap exists, old segments not yet deleted
    g.new.on_inactive()
    g.new.flush()
    g.new.rename_suffix(".swap")
    again = Log.open(log.dir, cfg, clock)
    rows = read_all(again)
    assert latest(rows) == latest(before)
    offsets = [o for o, _k, _v in rows]
    assert offsets == sorted(set(offsets))
    assert again.log_end_offset == log.log_end_offset


def test_all_records_of_group_removed_keeps_range(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log(segment_bytes=120, **COMPACT)
    for r in range(6):
        put(log, clock, (b"k", b"%d" % r))
    put(log, clock, (b"z", b"keep"))
    log.roll()
    leo = log.log_end_offset
    cleaner.clean_log(log, None, clock.time_ms())
    assert latest(read_all(log)) == {b"k": b"5", b"z": b"keep"}
    segs = log.segments
    for seg, nxt in zip(segs, segs[1:], strict=False):
        assert seg.next_offset <= nxt.base_offset
    assert log.log_end_offset == leo


def test_checkpoint_roundtrip(tmp_path: Path) -> None:
    assert cleaner.read_checkpoint(tmp_path) == {}
    data = {("a-b", 0): 10, ("__consumer_offsets", 49): 3}
    cleaner.write_checkpoint(tmp_path, data)
    assert cleaner.read_checkpoint(tmp_path) == data


def test_abort_deletes_output(open_log: OpenLog, clock: FakeClock) -> None:
    import threading

    log = open_log(segment_bytes=300, **COMPACT)
    updates(log, clock, 10)
    log.roll()
    p = cleaner.plan(log, None, clock.time_ms())
    assert p is not None
    ev = threading.Event()
    ev.set()
    with pytest.raises(cleaner.CleanAborted):
        cleaner.clean(p, clock.time_ms(), abort=ev)
    assert not list(log.dir.glob("*.cleaned"))


def test_not_compacted_log_is_ignored(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log(segment_bytes=300)
    updates(log, clock, 10)
    assert cleaner.plan(log, None, clock.time_ms()) is None


def test_null_key_rejected_in_compacted_topic(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log(**COMPACT)
    with pytest.raises(RecordValidationError) as info:
        put(log, clock, (b"a", b"1"), (None, b"x"), compression=1)
    assert info.value.error_code == 87
    assert [i for i, _m in info.value.record_errors] == [1]  # KIP-467: only the bad record
    assert log.log_end_offset == 0
    put(log, clock, (b"a", b"1"))  # keyed records are fine
    plain = open_log(segment_bytes=300)
    put(plain, clock, (None, b"x"))  # only compacted topics check


def test_log_changed_during_clean_drops_output(tmp_path: Path, clock: FakeClock) -> None:
    cfg = LogConfig(segment_bytes=300, cleanup_policy="compact,delete", retention_ms=1000,
                    min_cleanable_dirty_ratio=0.0)  # fmt: skip
    log = Log.open(tmp_path / "t-0", cfg, clock)
    updates(log, clock, 10)
    log.roll()
    p = cleaner.plan(log, None, clock.time_ms())
    assert p is not None
    cleaner.open_plan(p)  # what the service does on the event loop before the worker thread
    clock.advance(5000)
    put(log, clock, (b"new", b"1"))
    assert log.enforce_retention() > 0  # retention deletes segments the cleaner is reading
    res = cleaner.clean(p, clock.time_ms())  # still reads them through its own descriptors
    assert res.groups
    assert not cleaner.commit(log, res)
    assert not list(log.dir.glob("*.cleaned"))
    assert latest(read_all(log)) == {b"new": b"1"}


# --- delete horizon (KIP-534) ---------------------------------------------------------------

DAY = 86_400_000


def _tombstone_headers(log: Log) -> list[tuple[rb.BatchHeader, list[rb.Record]]]:
    out = []
    for seg in log.segments:
        for h, data in seg.batches():
            recs = rb.decode_records(data)
            if any(r.value is None for r in recs):
                out.append((h, recs))
    return out


def test_old_tombstone_survives_first_cleaning(open_log: OpenLog, clock: FakeClock) -> None:
    """A tombstone whose own timestamp is far older than delete.retention.ms stays for
    delete.retention.ms after the cleaner first passes it (the horizon is set then)."""
    log = open_log(segment_bytes=300, delete_retention_ms=DAY, **COMPACT)
    old_ts = clock.time_ms() - 3 * DAY
    log.append(rb.build_batch([(b"gone", b"v", [], clock.time_ms())]))
    log.append(rb.build_batch([(b"gone", None, [], old_ts)]))  # an old CreateTime tombstone
    log.high_watermark = log.log_end_offset
    updates(log, clock, 2)
    log.roll()
    first = clock.time_ms()
    assert cleaner.clean_log(log, None, first, force=True) is not None
    ((header, recs),) = _tombstone_headers(log)
    assert header.attributes & rb.DELETE_HORIZON_BIT
    assert header.base_timestamp == first + DAY  # the horizon
    assert [(r.key, r.value, r.timestamp) for r in recs] == [(b"gone", None, old_ts)]
    # cleanings before the horizon keep it (and do not move the horizon)
    clock.advance(DAY - 10)
    updates(log, clock, 1)  # 5 ms more
    log.roll()
    assert clock.time_ms() < first + DAY
    cleaner.clean_log(log, None, clock.time_ms(), force=True)
    ((header, _recs),) = _tombstone_headers(log)
    assert header.base_timestamp == first + DAY
    # past the horizon the next cleaning drops it
    clock.advance(5)
    updates(log, clock, 1)
    log.roll()
    cleaner.clean_log(log, None, clock.time_ms(), force=True)
    assert _tombstone_headers(log) == []
    assert b"gone" not in latest(read_all(log))
    # the rewritten batches are valid for every reader
    assert all(rb.verify_crc(data) for seg in log.segments for _h, data in seg.batches())


def _markers(log: Log) -> list[rb.BatchHeader]:
    """Control batches that still hold their marker (a dropped one may stay as an empty batch
    where the segment's offset range needs it)."""
    return [h for h in headers(log) if h.is_control and h.record_count]


def test_transaction_markers_removed_after_their_horizon(open_log: OpenLog,
                                                         clock: FakeClock) -> None:  # fmt: skip
    log = open_log(segment_bytes=300, delete_retention_ms=DAY, **COMPACT)
    put(log, clock, (b"a", b"aborted"), producer_id=5, producer_epoch=0, base_sequence=0,
        is_transactional=True)  # fmt: skip
    log.append(_marker(clock, 5, commit=False), origin=AppendOrigin.COORDINATOR)
    put(log, clock, (b"b", b"committed"), producer_id=6, producer_epoch=0, base_sequence=0,
        is_transactional=True)  # fmt: skip
    log.append(_marker(clock, 6, commit=True), origin=AppendOrigin.COORDINATOR)
    put(log, clock, (b"c", b"1"), producer_id=5, producer_epoch=0, base_sequence=1)
    put(log, clock, (b"c", b"2"), producer_id=6, producer_epoch=0, base_sequence=1)
    log.high_watermark = log.log_end_offset
    log.roll()
    first = clock.time_ms()
    cleaner.clean_log(log, None, first, force=True)
    abort, commit = _markers(log)
    assert (abort.producer_id, _horizon(abort)) == (5, first + DAY)  # its data went: clock runs
    assert (commit.producer_id, _horizon(commit)) == (6, None)  # its data is still there
    # the committed value is superseded: the commit marker's transaction is empty now
    put(log, clock, (b"b", b"newer"))
    log.roll()
    second = clock.time_ms() + 10
    cleaner.clean_log(log, None, second, force=True)
    assert [(h.producer_id, _horizon(h)) for h in _markers(log)] == [(5, first + DAY),
                                                                    (6, second + DAY)]  # fmt: skip
    clock.advance(DAY + 5)  # past the abort marker's horizon, not the commit marker's
    put(log, clock, (b"d", b"x"))
    log.roll()
    cleaner.clean_log(log, None, clock.time_ms(), force=True)
    assert [h.producer_id for h in _markers(log)] == [6]  # the abort marker is gone
    clock.advance(DAY)
    put(log, clock, (b"d", b"y"))
    log.roll()
    cleaner.clean_log(log, None, clock.time_ms(), force=True)
    assert _markers(log) == []
    assert latest(read_all(log)) == {b"b": b"newer", b"c": b"2", b"d": b"y"}


def _horizon(h: rb.BatchHeader) -> int | None:
    return h.base_timestamp if h.attributes & rb.DELETE_HORIZON_BIT else None
