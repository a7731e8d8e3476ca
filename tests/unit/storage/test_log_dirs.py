"""Several log directories: placement (fewest partitions first), per-directory checkpoints,
duplicate live directories, and the crash points of a move (:mod:`strom.storage.log_move`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from strom.clock import FakeClock
from strom.storage import log_dir, log_move
from strom.storage.errors import DuplicateLogDirError
from strom.storage.log import Log
from strom.storage.log_manager import LogManager, future_name, parse_future_name

from .conftest import batch, values


def dirs(tmp_path: Path) -> list[Path]:
    return [tmp_path / "a", tmp_path / "b"]


def fill(log: Log, clock: FakeClock, start: int, n: int) -> None:
    for i in range(start, start + n):
        log.append(batch(clock, b"v%d" % i))


def read_all(log: Log) -> list[bytes | None]:
    out: list[tuple[int, bytes | None]] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        out += values(log.read(offset, 1 << 20).records)
        offset = out[-1][0] + 1
    return [v for _o, v in out]


def test_new_partitions_go_to_the_directory_with_the_fewest(tmp_path: Path) -> None:
    clock = FakeClock()
    a, b = dirs(tmp_path)
    mgr = LogManager([a, b], clock, {})
    mgr.add("t", mgr.create_logs("t", range(3), {}), {})  # a, b, a
    assert sorted(p.name for p in a.iterdir() if p.is_dir()) == ["t-0", "t-2"]
    assert [p.name for p in b.iterdir() if p.is_dir()] == ["t-1"]
    assert mgr.next_dirs(3) == [b, a, b]  # b has 1, a has 2: b first, then alternate
    mgr.create("u", 0, {})
    assert (b / "u-0").is_dir() and mgr.partition_counts() == {a: 2, b: 2}
    mgr.close_all()
    for d in (a, b):  # each directory has its own lock, checkpoint and clean marker
        assert (d / ".lock").exists() and (d / log_dir.CLEAN_SHUTDOWN_FILE).exists()
    assert set(log_dir.read_offsets(a / log_dir.RECOVERY_POINT_FILE)) == {("t", 0), ("t", 2)}
    assert set(log_dir.read_offsets(b / log_dir.RECOVERY_POINT_FILE)) == {("t", 1), ("u", 0)}


def test_start_up_loads_every_directory_and_refuses_duplicates(tmp_path: Path) -> None:
    clock = FakeClock()
    a, b = dirs(tmp_path)
    mgr = LogManager([a, b], clock, {})
    mgr.add("t", mgr.create_logs("t", range(2), {}), {})
    fill(mgr.get("t", 1), clock, 0, 5)  # type: ignore[arg-type]
    mgr.close_all()
    again = LogManager([a, b], clock, {})
    assert again.load(lambda _t: {}) == []
    assert read_all(again.get("t", 1)) == [b"v%d" % i for i in range(5)]  # type: ignore[arg-type]
    again.close_all()
    (a / "t-1").mkdir()  # t-1 lives in b: a second live copy
    with pytest.raises(DuplicateLogDirError, match="t-1"):
        LogManager([a, b], clock, {}).load(lambda _t: {})


def test_future_names() -> None:
    name = future_name(Path("/x/my-topic.v1-3")).name
    assert name.endswith("-future") and parse_future_name(name) == ("my-topic.v1", 3)
    assert parse_future_name("my-topic-3") is None


def _moving(tmp_path: Path) -> tuple[FakeClock, Path, Path, Path, Path]:
    """A log of 30 records in a (small segments), copied to b as a future replica, the log
    closed as the swap does; returns (clock, a, b, source dir, future dir)."""
    clock = FakeClock()
    a, b = dirs(tmp_path)
    mgr = LogManager([a], clock, {"log.segment.bytes": "300"})
    mgr.add("t", mgr.create_logs("t", [0], {}), {})
    log = mgr.get("t", 0)
    assert log is not None
    fill(log, clock, 0, 20)
    b.mkdir()
    future = future_name(b / "t-0")
    future.mkdir()
    copied: log_move.FileState = {}
    log_move.copy_pass(log.dir, future, copied)  # while the log serves
    fill(log, clock, 20, 10)
    assert len(log.segments) > 2
    log.close(sync=True)
    log_move.copy_pass(log.dir, future, copied)  # the final pass, appends stopped
    mgr._logs.clear()  # the manager is "killed": no clean close of the directory
    mgr._unlock()
    return clock, a, b, log.dir, future


def _restart(a: Path, b: Path, clock: FakeClock) -> tuple[LogManager, list[Path]]:
    mgr = LogManager([a, b], clock, {"log.segment.bytes": "300"})
    return mgr, mgr.load(lambda _t: {})


def _only_replica(mgr: LogManager, doomed: list[Path], where: Path) -> None:
    log = mgr.get("t", 0)
    assert log is not None and log.dir == where / "t-0"
    assert read_all(log) == [b"v%d" % i for i in range(30)]
    live = [d / "t-0" for d in mgr.dirs if (d / "t-0").is_dir()]
    assert live == [where / "t-0"]
    for path in doomed:  # what start-up hands back for removal is never the live one
        assert path.name != "t-0"


def test_crash_before_the_commit_keeps_the_original_and_the_copy_to_resume(
    tmp_path: Path,
) -> None:
    clock, a, b, _src, future = _moving(tmp_path)
    stale = future_name(b / "t-0")  # an older copy (a move redirected): removed
    stale.mkdir()
    os.utime(stale, ns=(1, 1))
    mgr, doomed = _restart(a, b, clock)
    assert future not in doomed and stale in doomed
    assert mgr.futures == {("t", 0): future} and future.is_dir()
    _only_replica(mgr, doomed, a)


def test_a_copy_of_a_partition_no_longer_hosted_is_removed(tmp_path: Path) -> None:
    clock, a, b, _src, future = _moving(tmp_path)
    mgr = LogManager([a, b], clock, {"log.segment.bytes": "300"})
    doomed = mgr.load(lambda _t: {}, lambda _t, _p: False)
    assert future in doomed and mgr.futures == {}


def _tree(path: Path) -> dict[str, bytes]:
    return {f.name: f.read_bytes() for f in sorted(path.iterdir()) if f.is_file()}


def test_resume_keeps_what_equals_the_source_and_copies_the_rest(tmp_path: Path) -> None:
    """A copy a crash left: a .log with a torn tail (garbage past the common prefix), a .log
    the source rewrote from the start, a file the source no longer has, an index half
    written. Resuming keeps only the common prefixes, then one pass makes it identical."""
    clock, a, _b, src, future = _moving(tmp_path)
    logs = sorted(src.glob("*.log"))
    assert len(logs) >= 3
    torn = future / logs[-1].name
    data = logs[-1].read_bytes()
    torn.write_bytes(data[: len(data) // 2] + b"\xff" * 100)  # half, then garbage
    rewritten = future / logs[0].name
    first = logs[0].read_bytes()
    rewritten.write_bytes(bytes([first[0] ^ 1]) + first[1:])  # differs at byte 0
    (future / "00000000000000099999.log").write_bytes(b"gone from the source")
    index = next(future.glob("*.index"))
    index.write_bytes(b"junk")
    state = log_move.resume_state(src, future)
    assert state[torn.name][1] == len(data) // 2
    assert state[rewritten.name][1] == 0
    assert state[logs[1].name][1] == logs[1].stat().st_size  # intact: all of it kept
    assert not (future / "00000000000000099999.log").exists()
    assert index.name not in state  # copied again whole
    written = log_move.copy_pass(src, future, state)
    assert written < sum(f.stat().st_size for f in src.iterdir() if f.is_file())
    assert _tree(future) == _tree(src)


def test_a_stopped_copy_ends_between_chunks(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    dst.mkdir()
    (src / "00000000000000000000.log").write_bytes(os.urandom(5 << 20))
    chunks: list[int] = []

    def stopped() -> bool:
        chunks.append(1)
        return len(chunks) > 2

    throttle = log_move.Throttle(lambda: log_move.UNLIMITED, stopped)
    with pytest.raises(log_move.CopyStopped):
        log_move.copy_pass(src, dst, {}, throttle=throttle)
    assert (dst / "00000000000000000000.log").stat().st_size < 5 << 20


def test_crash_between_the_renames_promotes_the_complete_copy(tmp_path: Path) -> None:
    clock, a, b, src, future = _moving(tmp_path)
    doomed_src = src.with_name("t-0.0123-delete")
    os.rename(src, doomed_src)  # rename 1 of log_move.commit, then the crash
    mgr, doomed = _restart(a, b, clock)
    assert doomed_src in doomed and not future.exists()
    _only_replica(mgr, doomed, b)


def test_crash_after_the_commit_keeps_the_moved_replica(tmp_path: Path) -> None:
    clock, a, b, src, future = _moving(tmp_path)
    live, doomed_src = log_move.commit(src, future)
    assert live == b / "t-0" and not src.exists()
    mgr, doomed = _restart(a, b, clock)
    assert doomed == [doomed_src]
    _only_replica(mgr, doomed, b)
