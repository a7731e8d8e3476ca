"""The bounded cache of segment descriptors, and logs that hold at most one descriptor each."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from strom.clock import FakeClock
from strom.storage import file_handles, fileio
from strom.storage.file_handles import FileHandles, LogFile
from strom.storage.log import Log
from strom.storage.log_config import LogConfig
from strom.storage.log_manager import LogManager

from .conftest import batch


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_lru_keeps_at_most_capacity_open_and_reopens_on_demand(tmp_path: Path) -> None:
    cache = FileHandles(4)
    files = [cache.create(tmp_path / f"f{i}") for i in range(10)]
    assert len(cache) == 4
    assert [f.fd >= 0 for f in files] == [False] * 6 + [True] * 4  # the newest stay open
    fd = cache.acquire(files[0])  # reopened, evicting the least recently used
    os.pwrite(fd, b"hello", 0)
    cache.release(files[0])
    assert files[6].fd < 0 and len(cache) == 4
    assert os.pread(cache.acquire(files[0]), 5, 0) == b"hello"
    cache.release(files[0])
    for f in files:
        cache.close(f)
    assert len(cache) == 0
    with pytest.raises(ValueError):
        cache.acquire(files[0])


def test_pinned_descriptors_are_never_closed_by_eviction(tmp_path: Path) -> None:
    cache = FileHandles(4)
    pinned = [cache.create(tmp_path / f"p{i}") for i in range(4)]
    fds = [cache.acquire(f) for f in pinned]
    extra = cache.create(tmp_path / "extra")  # over capacity: opens anyway
    assert [f.fd for f in pinned] == fds and extra.fd >= 0
    for f in pinned:
        cache.release(f)
    cache.acquire(cache.create(tmp_path / "more"))
    assert len(cache) <= 4


def test_open_out_of_descriptors_sheds_cached_files(tmp_path: Path, monkeypatch) -> None:
    cache = FileHandles(1000)
    files = [cache.create(tmp_path / f"f{i}") for i in range(20)]
    real_open = os.open
    calls = []

    def failing_open(path, flags, mode=0o777):  # type: ignore[no-untyped-def]
        calls.append(path)
        if len(calls) == 1:
            raise OSError(24, "Too many open files")
        return real_open(path, flags, mode)

    cache.close(files[0])
    late = LogFile(tmp_path / "late")
    monkeypatch.setattr(fileio, "open_fd", failing_open)
    fd = cache.acquire(late, create=True)
    cache.release(late)
    assert fd >= 0 and len(calls) == 2 and len(cache) <= 11  # half of the 19 were shed


def test_a_thousand_logs_hold_a_bounded_number_of_descriptors(
    tmp_path: Path, clock: FakeClock
) -> None:
    old = file_handles.HANDLES.capacity
    file_handles.configure(32)
    before = _open_fds()
    try:
        manager = LogManager(tmp_path / "data", clock, {})
        logs = manager.create_logs("t", range(1000), {})
        manager.add("t", logs, {})
        for i, log in enumerate(logs):
            log.append(batch(clock, b"v%d" % i))
        assert _open_fds() - before <= 32 + 2  # + the directory lock
        for log in logs:  # every log still reads back, reopening its file
            assert log.read(0, 1000).records
        manager.close_all()
        assert _open_fds() <= before
        again = LogManager(tmp_path / "data", clock, {})
        again.load(lambda _t: {})
        assert [again.get("t", p).log_end_offset for p in range(1000)] == [1] * 1000  # type: ignore[union-attr]
        assert all(again.get("t", p).recovered == 0 for p in range(1000))  # type: ignore[union-attr]
        again.close_all()
    finally:
        file_handles.configure(old)


def test_creation_is_all_or_nothing(tmp_path: Path, clock: FakeClock) -> None:
    manager = LogManager(tmp_path / "data", clock, {})
    os.symlink("t-7", tmp_path / "data" / "t-7")  # a directory that cannot be made
    with pytest.raises(OSError):
        manager.create_logs("t", range(20), {})
    assert sorted(os.listdir(tmp_path / "data")) == [".lock", "t-7"]
    manager.close_all()


def test_indexes_hold_no_descriptor_and_reach_disk_at_flush(tmp_path: Path, clock: FakeClock) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig(index_interval_bytes=1), clock)  # type: ignore[arg-type]
    for i in range(5):
        log.append(batch(clock, b"v%d" % i))
    seg = log.active
    assert len(seg.index) == 4 and not seg.index.path.exists()
    log.flush()
    assert seg.index.path.stat().st_size == 4 * 8
    log.close()
    reopened = Log.open(tmp_path / "t-0", LogConfig(index_interval_bytes=1), clock)  # type: ignore[arg-type]
    assert len(reopened.active.index) == 4 and reopened.recovered == 0
    assert [len(b) for b in [reopened.read(3, 1000).records]] and reopened.log_end_offset == 5
    reopened.close()
