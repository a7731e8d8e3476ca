"""The flusher thread: a roll, a flush.messages flush and checkpoints never make the log's
caller wait on the disk, and ordering holds (no checkpoint claims an offset not yet fsynced).

A slow disk is simulated by a gate: ``LogSegment.flush`` blocks until the test opens it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from strom.clock import FakeClock
from strom.storage import checkpoint as ckpt
from strom.storage import segment as segment_mod
from strom.storage.flusher import Flusher
from strom.storage.log import Log
from strom.storage.log_config import LogConfig
from tests.unit.storage.conftest import batch, values

BOUND_S = 0.5  # what an append may take while an fsync is stuck (it takes ~1 ms)


class SlowDisk:
    """Makes every segment fsync wait for ``release()`` and records what was fsynced."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.gate = threading.Event()
        self.started = threading.Event()
        self.flushed: list[int] = []  # next_offset of each segment fsynced, in order
        real = segment_mod.LogSegment.flush

        def slow_flush(seg: segment_mod.LogSegment) -> None:
            self.started.set()
            assert self.gate.wait(30), "the test never released the disk"
            real(seg)
            self.flushed.append(seg.next_offset)

        monkeypatch.setattr(segment_mod.LogSegment, "flush", slow_flush)

    def release(self) -> None:
        self.gate.set()


@pytest.fixture
def flusher() -> Iterator[Flusher]:
    f = Flusher()
    yield f
    f.close()


def _open(tmp_path: Path, clock: FakeClock, flusher: Flusher, **cfg: object) -> Log:
    return Log.open(tmp_path / "t-0", LogConfig(**cfg), clock, flusher=flusher)  # type: ignore[arg-type]


@pytest.mark.serial  # timed against BOUND_S
def test_roll_does_not_wait_for_the_fsync(tmp_path: Path, clock: FakeClock, flusher: Flusher,
                                          monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    log = _open(tmp_path, clock, flusher, segment_bytes=300)
    disk = SlowDisk(monkeypatch)
    rp_file = log.dir / ckpt.RECOVERY_POINT_FILE
    before = ckpt.read_offset(rp_file, 0)
    t0 = time.monotonic()
    for i in range(12):  # several rolls, each queueing an fsync that cannot finish
        log.append(batch(clock, b"x" * 60, producer_id=7, producer_epoch=0, base_sequence=i))
    elapsed = time.monotonic() - t0
    assert disk.started.wait(5)
    assert len(log.segments) >= 4
    assert elapsed < BOUND_S, f"appends with rolls took {elapsed:.3f}s while the disk was stuck"
    # nothing claimed durable yet: neither in memory nor in the checkpoint file
    assert log.recovery_point == before
    assert ckpt.read_offset(rp_file, 0) == before
    disk.release()
    log.durable().result(10)
    assert log.recovery_point == log.segments[-2].next_offset
    assert ckpt.read_offset(rp_file, 0) == log.recovery_point
    assert max(disk.flushed) >= log.recovery_point  # fsynced before it was claimed
    assert log.producer_state.snapshot_offsets()[-1] == log.segments[-1].base_offset
    got = []
    while len(got) < 12:
        got += values(log.read(len(got), 1 << 20).records)
    assert got == [(i, b"x" * 60) for i in range(12)]
    log.close()


def test_checkpoint_never_claims_an_offset_not_yet_fsynced(tmp_path: Path, clock: FakeClock,
                                                           flusher: Flusher,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    log = _open(tmp_path, clock, flusher, segment_bytes=200)
    events: list[tuple[str, int]] = []
    real_flush = segment_mod.LogSegment.flush
    real_write = ckpt.write_offset

    def flush(seg: segment_mod.LogSegment) -> None:
        time.sleep(0.002)
        real_flush(seg)
        events.append(("fsync", seg.next_offset))

    def write(path: Path, value: int) -> None:
        if path.name == ckpt.RECOVERY_POINT_FILE:
            events.append(("checkpoint", value))
        real_write(path, value)

    monkeypatch.setattr(segment_mod.LogSegment, "flush", flush)
    monkeypatch.setattr(ckpt, "write_offset", write)
    for _ in range(40):
        log.append(batch(clock, b"y" * 50))
    log.durable().result(60)  # ~40 real fsyncs: seconds when other processes load the disk
    durable = 0
    claims = 0
    for kind, offset in events:
        if kind == "fsync":
            durable = max(durable, offset)
        else:
            assert offset <= durable, events
            claims += 1
    assert claims >= 5
    log.close()


@pytest.mark.serial  # timed against BOUND_S
def test_flush_messages_future_completes_after_the_fsync(tmp_path: Path, clock: FakeClock,
                                                         flusher: Flusher,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    log = _open(tmp_path, clock, flusher, flush_messages=2)
    disk = SlowDisk(monkeypatch)
    first = log.append(batch(clock, b"a"))
    assert first.flushed is None
    t0 = time.monotonic()
    second = log.append(batch(clock, b"b"))
    assert time.monotonic() - t0 < BOUND_S
    assert second.flushed is not None
    assert disk.started.wait(5)
    assert not second.flushed.done()  # a response with acks must still wait
    disk.release()
    second.flushed.result(10)
    assert log.recovery_point == 2 == ckpt.read_offset(log.dir / ckpt.RECOVERY_POINT_FILE, 0)
    log.close()


def test_truncation_cancels_a_queued_recovery_point(tmp_path: Path, clock: FakeClock,
                                                    flusher: Flusher,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    log = _open(tmp_path, clock, flusher)
    for _ in range(5):
        log.append(batch(clock, b"z"))
    log.flush_async().result(10)
    assert log.recovery_point == 5
    for _ in range(5):
        log.append(batch(clock, b"z"))
    disk = SlowDisk(monkeypatch)
    pending = log.flush_async()  # would claim 10
    assert disk.started.wait(5)
    releaser = threading.Timer(0.2, disk.release)
    releaser.start()
    log.truncate_to(7)  # waits for the queued job, then truncates
    pending.result(10)
    releaser.join()
    assert log.log_end_offset == 7
    assert log.recovery_point <= 7
    assert ckpt.read_offset(log.dir / ckpt.RECOVERY_POINT_FILE, 0) <= 7
    log.close()


def test_close_waits_for_queued_work_and_marks_a_clean_shutdown(tmp_path: Path, clock: FakeClock,
                                                                flusher: Flusher) -> None:  # fmt: skip
    log = _open(tmp_path, clock, flusher, segment_bytes=200)
    for _ in range(30):
        log.append(batch(clock, b"w" * 40))
    end = log.log_end_offset
    log.close()
    assert (log.dir / ckpt.CLEAN_SHUTDOWN_FILE).exists()
    assert ckpt.read_offset(log.dir / ckpt.RECOVERY_POINT_FILE, 0) == end
    again = Log.open(log.dir, log.config, clock)
    assert again.log_end_offset == end and again.recovery_point == end
    again.close()


def test_a_failing_job_does_not_stop_the_flusher(flusher: Flusher) -> None:
    def boom() -> None:
        raise OSError("disk on fire")

    ran: list[int] = []
    bad = flusher.submit(boom)
    good = flusher.submit(lambda: ran.append(1))
    with pytest.raises(OSError):
        bad.result(5)
    good.result(5)
    assert ran == [1]


def test_drain_waits_only_while_work_is_pending(flusher: Flusher) -> None:
    gate = threading.Event()
    fut = flusher.submit(lambda: gate.wait(10) and None)
    assert not flusher.idle
    threading.Timer(0.1, gate.set).start()
    flusher.drain(10)
    assert fut.done() and flusher.idle
    flusher.drain(0)  # nothing pending: returns at once


def test_leader_epoch_write_queued_behind_a_newer_one_is_dropped(tmp_path: Path) -> None:
    """Retention's leader-epoch write goes through the flusher; a synchronous write made after
    it (a new epoch, written by a synchronous flush) must not be overwritten by it when it
    finally runs."""
    from strom.storage.leader_epoch import LeaderEpochCache

    cache = LeaderEpochCache(tmp_path)
    cache.assign(0, 0)
    cache.assign(1, 10)
    queued: list[object] = []
    cache.truncate_from_start(12, queued.append)  # held back, as by a busy flusher
    cache.assign(2, 20)  # not written yet (KAFKA-15046: at the log's next flush)
    assert cache.dirty
    cache.flush()  # written at once
    for job in queued:
        job()  # type: ignore[operator]
    again = LeaderEpochCache(tmp_path)
    assert again.load()
    assert list(again.entries()) == [(1, 12), (2, 20)]


def test_a_new_epoch_reaches_its_file_at_the_roll_before_the_recovery_point_moves(
    tmp_path: Path, clock: FakeClock, flusher: Flusher, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first leader epoch is not written on the append path (KAFKA-15046); the roll queues
    its write on the flusher ahead of the fsync that moves the recovery point past it."""
    from strom.storage.leader_epoch import LeaderEpochCache

    log = _open(tmp_path, clock, flusher, segment_bytes=300)
    disk = SlowDisk(monkeypatch)
    log.append(batch(clock, b"x" * 60), leader_epoch=3)
    assert log.leader_epochs.dirty and not log.leader_epochs.path.exists()
    while len(log.segments) < 2:
        log.append(batch(clock, b"x" * 60), leader_epoch=3)
    assert disk.started.wait(5)  # the rolled segment's fsync is stuck
    on_disk = LeaderEpochCache(log.dir)
    assert on_disk.load() and on_disk.entries() == [(3, 0)]
    assert log.recovery_point == 0
    disk.release()
    log.durable().result(10)
    assert log.recovery_point == log.segments[-2].next_offset > 0


def test_data_dir_recovery_points_are_checkpointed_by_the_flusher(tmp_path: Path,
                                                                  clock: FakeClock) -> None:  # fmt: skip
    """The data directory's checkpoint holds each log's recovery point as the flusher moved it
    (after its fsync), and shutdown's holds the log end offsets."""
    from strom.storage import log_dir
    from strom.storage.log_manager import LogManager

    manager = LogManager(tmp_path, clock, {"log.segment.bytes": "300"}, Flusher())
    log = manager.create("t", 0, {})
    manager.create("u", 0, {})
    for _ in range(8):
        log.append(batch(clock, b"x" * 60))
    assert len(log.segments) >= 2
    log.durable().result(10)
    manager.checkpoint_recovery_points_async().result(10)
    path = tmp_path / log_dir.RECOVERY_POINT_FILE
    rolled_at = log.segments[-1].base_offset
    assert log_dir.read_offsets(path) == {("t", 0): rolled_at, ("u", 0): 0}
    manager.close_all()
    assert log_dir.read_offsets(path) == {("t", 0): 8, ("u", 0): 0}
    assert (tmp_path / log_dir.CLEAN_SHUTDOWN_FILE).exists()
