"""file.delete.delay.ms: removed segments are renamed ``.deleted`` and unlinked later."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from strom.clock import FakeClock
from strom.storage.log import Log
from strom.storage.log_manager import LogManager

from .conftest import batch, values

OpenLog = Callable[..., Log]


def names(log: Log) -> list[str]:
    return sorted(p.name for p in log.dir.iterdir() if ".log" in p.name or "index" in p.name)


def deleted(log: Log) -> list[str]:
    return sorted(p.name for p in log.dir.glob("*.deleted"))


def fill(log: Log, clock: FakeClock, n: int) -> None:
    for i in range(n):
        log.append(batch(clock, b"v%d" % i))
    log.high_watermark = log.log_end_offset


def test_retention_renames_then_deletes_after_the_delay(
    open_log: OpenLog, clock: FakeClock
) -> None:
    log = open_log(segment_bytes=100, retention_ms=1000, file_delete_delay_ms=5000)
    fill(log, clock, 3)
    path = log.segments[0].path
    fd = os.open(path, os.O_RDONLY)  # a reader holding the file open
    try:
        clock.advance(2000)
        assert log.enforce_retention() == 2
        assert deleted(log) == [
            f"{b:020d}{ext}.deleted" for b in (0, 1) for ext in (".index", ".log", ".timeindex")
        ]
        assert not path.exists() and log.segments[0].base_offset == 2
        assert os.pread(fd, 100, 0)  # still readable
        clock.advance(4999)
        assert log.delete_due_files() == 0 and len(deleted(log)) == 6
        clock.advance(1)
        assert log.delete_due_files() == 2 and deleted(log) == []
        assert os.pread(fd, 100, 0)  # the open fd keeps working after the unlink (Linux)
    finally:
        os.close(fd)
    # the active segment's indexes reach the disk at its first flush (they hold no fd)
    assert names(log) == [f"{2:020d}.log"]
    log.flush()
    assert names(log) == [f"{2:020d}{ext}" for ext in (".index", ".log", ".timeindex")]


def test_zero_delay_deletes_at_once(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log(segment_bytes=100, file_delete_delay_ms=0)
    fill(log, clock, 3)
    assert log.delete_records_before(2) == 2
    assert deleted(log) == [] and names(log) == [f"{2:020d}.log"]  # indexes: at flush


def test_close_and_reopen_leave_no_deleted_files(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log(segment_bytes=100)  # default delay: 60 s
    fill(log, clock, 4)
    log.delete_records_before(1)
    assert len(deleted(log)) == 3
    log.close()
    assert deleted(log) == []
    log = open_log(segment_bytes=100)
    log.delete_records_before(2)
    assert len(deleted(log)) == 3
    for seg in log.segments:  # crash: pending deletions are lost with the process
        seg.close()
    log = open_log(segment_bytes=100)
    assert deleted(log) == [] and log.log_start_offset == 2
    assert values(log.read(2, 1 << 20).records)[0] == (2, b"v2")
    log.close()


def test_compaction_swap_defers_deleting_the_old_segments(
    open_log: OpenLog, clock: FakeClock
) -> None:
    log = open_log(segment_bytes=100)
    fill(log, clock, 4)
    old = log.segments[:2]
    cleaned = log.create_cleaned_segment(0)
    header, data = next(old[1].batches())
    cleaned.append(data, header)
    log.replace_segments(old, cleaned)
    assert sorted(p.name for p in log.dir.glob("*.log.deleted")) == [
        f"{0:020d}.log.deleted",
        f"{1:020d}.log.deleted",
    ]
    assert values(log.read(0, 1 << 20).records) == [(1, b"v1")]
    # the same base offset is removed again before the first delay passed: no name clash
    again = log.create_cleaned_segment(0)
    again.append(data, header)
    log.replace_segments(log.segments[:1], again)
    assert len(list(log.dir.glob("*.log.deleted"))) == 2
    clock.advance(60_000)
    assert log.delete_due_files() == 2 and deleted(log) == []
    log.close()
    assert values(Log.open(log.dir, log.config, clock).read(0, 1 << 20).records) == [(1, b"v1")]


def test_log_manager_maintenance_deletes_due_files(tmp_path: Path, clock: FakeClock) -> None:
    mgr = LogManager(tmp_path, clock, {"log.segment.delete.delay.ms": "1000"})
    log = mgr.create("t", 0, {"segment.bytes": "100"})
    fill(log, clock, 3)
    log.delete_records_before(2)
    assert len(deleted(log)) == 6
    clock.advance(1000)
    mgr.maintenance()
    assert deleted(log) == []
    mgr.close_all()
