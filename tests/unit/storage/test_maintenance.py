"""Maintenance visits only logs that changed or have a deadline due, never all of them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from strom.clock import FakeClock
from strom.protocol.record_batch import build_batch
from strom.storage import cleaner
from strom.storage import segment as segment_mod
from strom.storage.log import Log
from strom.storage.log_config import LogConfig
from strom.storage.log_manager import LogManager
from strom.storage.maintenance import MaintenanceSchedule
from tests.unit.storage.conftest import batch


def test_schedule_takes_touched_and_due_keys_once() -> None:
    s: MaintenanceSchedule[str] = MaintenanceSchedule()
    s.schedule("a", 5.0)
    s.schedule("b", 10.0)
    s.touch("c")
    assert sorted(s.take_due(1.0)) == ["c"]
    assert s.take_due(1.0) == []
    s.schedule("a", 7.0)  # moved: the entry at 5.0 is stale
    assert s.take_due(6.0) == []
    assert s.take_due(7.0) == ["a"]
    s.schedule("b", None)
    assert s.take_due(100.0) == []
    for i in range(10_000):  # the same deadline again and again costs no heap growth
        s.schedule("x", 50.0 + (i % 2))
    assert len(s._heap) < 200


def test_idle_logs_are_not_visited(tmp_path: Path, clock: FakeClock) -> None:
    mgr = LogManager(tmp_path, clock, {"log.segment.bytes": "1000", "log.roll.ms": "60000",
                                       "log.retention.ms": "3600000"})  # fmt: skip
    for p in range(200):
        mgr.create("t", p, {})
    assert mgr.maintenance() == 200  # each new log once
    clock.advance(1000)
    assert mgr.maintenance() == 0
    log7 = mgr.get("t", 7)
    assert log7 is not None
    log7.append(batch(clock, b"v"))
    log7.high_watermark = log7.log_end_offset
    assert mgr.maintenance() == 1
    clock.advance(1000)
    assert mgr.maintenance() == 0
    # log 7's active segment is due for its segment.ms roll: visited then, not before
    clock.advance(57_000)
    assert mgr.maintenance() == 0
    clock.advance(2_000)
    assert mgr.maintenance() == 1
    assert len(log7.segments) == 2
    # and its old segment is due for retention.ms an hour after its timestamp
    clock.advance(3_600_000)
    assert mgr.maintenance() == 1
    assert log7.log_start_offset == 1 and len(log7.segments) == 1
    mgr.close_all()


def test_schedule_limit_leaves_the_rest_for_the_next_call() -> None:
    s: MaintenanceSchedule[int] = MaintenanceSchedule()
    for k in range(10):
        s.touch(k)
    s.schedule(100, 1.0)
    s.schedule(101, 9.0)
    first = s.take_due(2.0, limit=4)
    assert len(first) == 4 and s.backlog()
    second = s.take_due(2.0, limit=4)
    third = s.take_due(2.0, limit=4)
    assert len(second) == 4 and len(third) == 3 and not s.backlog()
    assert sorted(first + second + third) == [*range(10), 100]  # each once, none lost
    assert s.take_due(2.0, limit=4) == []
    assert s.take_due(9.0, limit=4) == [101]


def test_maintenance_in_slices_visits_every_due_log_once(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The broker's tick works in slices (yielding to the loop between them): a slice visits
    at most ``limit`` logs, the backlog says more is due, and every log is visited once (and
    swept once for expired producer ids)."""
    mgr = LogManager(tmp_path, clock, {"log.segment.bytes": "1000", "log.roll.ms": "60000",
                                       "producer.id.expiration.check.interval.ms": "1000"})  # fmt: skip
    for p in range(45):
        mgr.create("t", p, {})
    dirs = {lg.dir: tp for tp, lg in mgr.logs()}
    visits: list[tuple[str, int]] = []
    swept: list[tuple[str, int]] = []
    roll, expire = Log.maybe_roll_by_time, Log.remove_expired_producers

    def counting_roll(self: Log) -> None:
        visits.append(dirs[self.dir])
        roll(self)

    def counting_expire(self: Log) -> None:
        swept.append(dirs[self.dir])
        expire(self)

    monkeypatch.setattr(Log, "maybe_roll_by_time", counting_roll)
    monkeypatch.setattr(Log, "remove_expired_producers", counting_expire)
    clock.advance(1000)  # the producer-id expiry check is due too
    counts = [mgr.maintenance(limit=10)]
    while mgr.maintenance_backlog():
        counts.append(mgr.maintenance(limit=10))
    assert counts == [10, 10, 10, 10, 5]
    assert sorted(visits) == sorted(swept) == [("t", p) for p in range(45)]
    assert mgr.maintenance(limit=10) == 0 and not mgr.maintenance_backlog()
    mgr.close_all()


def test_pending_deletion_and_config_change_are_scheduled(tmp_path: Path, clock: FakeClock) -> None:
    mgr = LogManager(tmp_path, clock, {"log.segment.delete.delay.ms": "5000"})
    log = mgr.create("t", 0, {"segment.bytes": "200"})
    for _ in range(10):
        log.append(batch(clock, b"x" * 60))
    log.high_watermark = log.log_end_offset
    log.delete_records_before(6)
    mgr.maintenance()
    deleted = sorted(p.name for p in log.dir.glob("*.deleted"))
    assert deleted
    clock.advance(4000)
    assert mgr.maintenance() == 0
    clock.advance(1500)
    assert mgr.maintenance() == 1
    assert not list(log.dir.glob("*.deleted"))
    mgr.update_topic_config("t", {"segment.bytes": "200", "retention.bytes": "0"})
    assert mgr.maintenance() == 1  # the new retention.bytes applies at the next tick
    assert len(log.segments) == 1
    mgr.close_all()


def test_cleaner_commit_does_not_fsync(tmp_path: Path, clock: FakeClock,
                                       monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """The cleaned segments are fsynced by ``clean`` (the worker), not by the swap."""
    from strom.storage.log import Log

    log = Log.open(tmp_path / "c-0", LogConfig(segment_bytes=300, cleanup_policy="compact",
                                               min_cleanable_dirty_ratio=0.0), clock)  # fmt: skip
    for i in range(40):
        log.append(build_batch([(b"k%d" % (i % 3), b"v%d" % i, [], clock.time_ms())]))
    log.high_watermark = log.log_end_offset
    p = cleaner.plan(log, None, clock.time_ms())
    assert p is not None and p.should_clean()
    result = cleaner.clean(p, clock.time_ms())
    fsyncs: list[int] = []
    real = os.fsync
    monkeypatch.setattr(segment_mod.fileio, "fsync", lambda fd: (fsyncs.append(fd), real(fd))[1])
    assert cleaner.commit(log, result)
    assert fsyncs == []
    log.close()


def test_a_wall_clock_step_replans_retention(tmp_path: Path, clock: FakeClock) -> None:
    """Regression (issue 28): deadlines kept in monotonic time were planned from the wall
    clock once. A clock set back a day and corrected again then kept an expired segment a
    day past retention.ms; Kafka checks every log against the wall clock at each tick."""
    mgr = LogManager(tmp_path, clock, {"log.segment.bytes": "100", "log.retention.ms": "60000"})
    log = mgr.create("t", 0, {})
    for i in range(3):  # three segments (100-byte segments hold one batch)
        log.append(batch(clock, b"v%d" % i))
    log.high_watermark = log.log_end_offset
    assert len(log.segments) >= 3
    mgr.maintenance()
    clock.step_wall(-86_400_000)  # set back a day: nothing is old now
    clock.advance(1000)
    mgr.maintenance()  # plans the next retention check a day away (in monotonic time)
    assert log.log_start_offset == 0
    clock.step_wall(86_400_000 + 120_000)  # corrected, and two minutes passed by the wall
    clock.advance(1000)
    mgr.maintenance()
    assert log.log_start_offset > 0, "retention waited for the day the clock had lost"
    mgr.close_all()


def test_a_wall_clock_step_back_deletes_nothing(tmp_path: Path, clock: FakeClock) -> None:
    mgr = LogManager(tmp_path, clock, {"log.segment.bytes": "100", "log.retention.ms": "60000"})
    log = mgr.create("t", 0, {})
    for i in range(3):
        log.append(batch(clock, b"v%d" % i))
    log.high_watermark = log.log_end_offset
    clock.advance(30_000)
    mgr.maintenance()
    clock.step_wall(-3_600_000)  # back an hour: the records look to be from the future
    for _ in range(10):
        clock.advance(10_000)  # 100 s of monotonic time: more than retention.ms
        mgr.maintenance()
    assert log.log_start_offset == 0 and len(log.segments) >= 3
    mgr.close_all()
