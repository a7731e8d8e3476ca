"""A slow disk's appends (strom.storage.slow_disk): written by a writer thread, part of the log
only once written; the directory's slow mark."""

from __future__ import annotations

import errno
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.clock import FakeClock
from strom.storage import fileio, slow_disk
from strom.storage.batch_validation import AppendOrigin
from strom.storage.errors import DiskError
from strom.storage.log import Log
from strom.storage.log_config import LogConfig
from strom.storage.slow_disk import DiskSpeed, WriterPool

from .conftest import batch, leader_log_and_batches, values

OpenLog = Callable[..., Log]


class Gate:
    """Holds the writer threads' writes (``pwritev``, as a Produce's append makes) until
    :meth:`release`, or fails them with ``error``: a stalled or failing disk."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.entered = threading.Event()
        self.error: int | None = None
        self.writes = 0

    def wrap(self, real: Callable[..., int]) -> Callable[..., int]:
        def pwritev(fd: int, buffers: Any, position: int) -> int:
            if threading.current_thread().name.startswith("strom-writer"):
                self.writes += 1
                self.entered.set()
                assert self.open.wait(10)
                if self.error is not None:
                    raise OSError(self.error, "injected")
            return real(fd, buffers, position)

        return pwritev

    def release(self) -> None:
        self.open.set()


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Gate:
    g = Gate()
    monkeypatch.setattr(fileio, "pwritev", g.wrap(fileio.pwritev))
    return g


@pytest.fixture
def writer() -> Iterator[WriterPool]:
    pool = WriterPool(2)
    yield pool
    pool.close()


def test_an_append_in_flight_is_not_part_of_the_log_until_written(
        open_log: OpenLog, clock: FakeClock, gate: Gate, writer: WriterPool) -> None:  # fmt: skip
    log = open_log()
    log.append(batch(clock, b"a"))
    log.high_watermark = 1
    pid = dict(producer_id=7, producer_epoch=0, base_sequence=0)
    first = batch(clock, b"b", b"c", **pid)
    result = log.append(first, writer=writer)
    assert (result.base_offset, result.last_offset, result.record_count) == (1, 2, 2)
    pending = log.in_flight
    assert pending is not None and gate.entered.wait(5)
    # nothing of it is readable, counted or acknowledged meanwhile
    assert log.log_end_offset == 1 and log.active.size == len(batch(clock, b"a"))
    assert log.read(1, 1 << 20).records == b""
    log.high_watermark = 10
    assert log.high_watermark == 1
    assert 7 not in log.producer_state.producers
    gate.release()
    done = pending.finish()
    assert log.in_flight is None
    assert (done.base_offset, done.last_offset, done.flushed) == (1, 2, None)
    assert log.log_end_offset == 3
    assert values(log.read(0, 1 << 20).records) == [(0, b"a"), (1, b"b"), (2, b"c")]
    assert log.producer_state.producers[7].last_seq == 1
    # the retried batch is a duplicate, answered with its first offsets
    dup = log.append(first, writer=writer)
    assert dup.duplicate and dup.base_offset == 1 and log.in_flight is None
    assert pending.finish() is done  # finishing again repeats the outcome


def test_a_failed_write_in_flight_leaves_the_log_as_it_was(
        open_log: OpenLog, clock: FakeClock, gate: Gate, writer: WriterPool) -> None:  # fmt: skip
    log = open_log()
    log.append(batch(clock, b"a"))
    size = log.active.size
    gate.error = errno.EIO
    pid = dict(producer_id=7, producer_epoch=0, base_sequence=0)
    log.append(batch(clock, b"b", **pid), writer=writer)
    pending = log.in_flight
    assert pending is not None
    gate.release()
    with pytest.raises(DiskError):
        pending.finish()
    assert log.log_end_offset == 1 and log.active.size == size
    assert log.active.path.stat().st_size == size  # the partial write was cut off
    assert 7 not in log.producer_state.producers
    # the same batch again is a new append (not a duplicate), written on this thread
    again = log.append(batch(clock, b"b", **pid))
    assert not again.duplicate and again.base_offset == 1
    assert values(log.read(0, 1 << 20).records) == [(0, b"a"), (1, b"b")]


def test_changes_of_the_log_wait_for_the_write_in_flight(
        open_log: OpenLog, clock: FakeClock, gate: Gate, writer: WriterPool) -> None:  # fmt: skip
    log = open_log()
    for v in (b"a", b"b"):
        log.append(batch(clock, v))
    log.append(batch(clock, b"c"), writer=writer)
    pending = log.in_flight
    assert pending is not None
    threading.Timer(0.2, gate.release).start()
    log.truncate_to(1)  # waits for the write, makes it part of the log, then truncates
    assert log.in_flight is None and pending.finish().base_offset == 2
    assert values(log.read(0, 1 << 20).records) == [(0, b"a")]
    # a sync append after a write in flight comes after it
    gate.open.clear()
    log.append(batch(clock, b"d"), writer=writer)
    threading.Timer(0.2, gate.release).start()
    r = log.append(batch(clock, b"e"))
    assert r.base_offset == 2
    assert values(log.read(0, 1 << 20).records) == [(0, b"a"), (1, b"d"), (2, b"e")]


def test_an_append_in_flight_rolls_first_and_flushes_as_configured(
        open_log: OpenLog, clock: FakeClock, gate: Gate, writer: WriterPool) -> None:  # fmt: skip
    log = open_log(segment_bytes=200, flush_messages=1)
    log.append(batch(clock, b"x" * 120))
    gate.release()
    log.append(batch(clock, b"y" * 120), writer=writer)
    pending = log.in_flight
    assert pending is not None and len(log.segments) == 2  # rolled before the write
    done = pending.finish()
    assert done.flushed is not None  # flush.messages=1: the caller waits for the fsync
    done.flushed.result(5)
    assert [s.base_offset for s in log.segments] == [0, 1] and log.log_end_offset == 2
    assert log.recovery_point == 2


def test_a_slow_write_marks_the_directory_slow(
        open_log: OpenLog, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    log = open_log()
    real = fileio.pwritev

    def slow(fd: int, buffers: Any, position: int) -> int:
        time.sleep(slow_disk.SLOW_WRITE_S + 0.05)
        return int(real(fd, buffers, position))

    log.append(batch(clock, b"fast"))
    assert not log.speed.slow
    monkeypatch.setattr(fileio, "pwritev", slow)
    log.append(batch(clock, b"slow"))
    assert log.speed.slow and log.speed.slow_events == 1


def test_the_slow_mark_is_held_while_a_write_is_stalled_and_then_for_a_while(
        monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    now = [100.0]
    monkeypatch.setattr(slow_disk, "_now", lambda: now[0])
    speed = DiskSpeed("d")
    speed.note(0.001)
    assert not speed.slow
    speed.note(slow_disk.SLOW_FSYNC_S / 2, slow_disk.SLOW_FSYNC_S)  # a fine fsync
    assert not speed.slow
    speed.note(slow_disk.SLOW_WRITE_S * 2)
    assert speed.slow
    now[0] += slow_disk.SLOW_HOLD_S / 2
    speed.note(0.001)
    assert speed.slow  # held
    started = threading.Event()
    go = threading.Event()

    def stalled() -> None:
        started.set()
        go.wait(5)

    t = threading.Thread(target=speed.timed, args=(stalled,))
    t.start()
    assert started.wait(5)
    now[0] += slow_disk.SLOW_HOLD_S
    speed.note(0.001)
    assert speed.slow  # a write going on for longer than the bound keeps it
    now[0] += 1
    go.set()
    t.join()
    assert speed.slow  # that write was slow itself: held again from its end
    now[0] += slow_disk.SLOW_HOLD_S
    speed.note(0.001)
    assert not speed.slow


def test_the_log_manager_shares_a_directory_s_speed(tmp_path: Path, clock: FakeClock) -> None:
    from strom.storage.log_manager import LogManager

    logs = LogManager(tmp_path / "data", clock, {})
    try:
        a, b = logs.create("a", 0, {}), logs.create("b", 0, {})
        assert a.speed is b.speed is logs.speeds[tmp_path / "data"]
    finally:
        logs.close_all()


def test_a_follower_copy_written_off_the_loop_is_the_leaders_log_byte_for_byte(
        tmp_path: Path, clock: FakeClock, writer: WriterPool) -> None:  # fmt: skip
    """A follower's fetched batches written by a writer thread (one write per fetch, when
    they fit the active segment; a fetch that needs a roll is written as before) make the
    same files as the leader's: offsets, indexes, aborted transactions, producer state."""
    cfg = LogConfig(segment_bytes=700, index_interval_bytes=150)
    leader, chunks = leader_log_and_batches(tmp_path / "leader-0", cfg, clock)
    follower = Log.open(tmp_path / "follower-0", cfg, clock)
    deferred = 0
    for i in range(0, len(chunks), 3):  # fetches of up to three batches
        end = follower.log_end_offset
        result = follower.append(b"".join(chunks[i : i + 3]), origin=AppendOrigin.REPLICATION,
                                 writer=writer)  # fmt: skip
        pending = follower.in_flight
        if pending is not None:
            deferred += 1
            assert follower.log_end_offset == end  # not part of the log until finished
            assert pending.finish().last_offset == result.last_offset
        assert follower.log_end_offset == result.last_offset + 1
    assert deferred >= 5 and deferred < len(chunks) // 3  # both ways were taken
    assert [s.base_offset for s in follower.segments] == [s.base_offset for s in leader.segments]
    assert follower.leader_epochs.entries() == leader.leader_epochs.entries()
    assert follower.collect_aborted(0, 1 << 30) == leader.collect_aborted(0, 1 << 30)
    assert follower.collect_aborted(0, 1 << 30)
    assert follower.producer_state.producers == leader.producer_state.producers
    leader.close()
    follower.close()
    for seg in leader.segments:
        for path in seg.file_paths():
            copy = tmp_path / "follower-0" / path.name
            assert copy.exists() == path.exists(), path.name
            if path.exists():
                assert copy.read_bytes() == path.read_bytes(), path.name
