"""The offset and time indexes over their shared base: sanity checks at load, truncation and
reset reaching the file at once, appends that do not advance ignored, size bound."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from strom.storage.abstract_index import CorruptIndexError
from strom.storage.index import OffsetIndex
from strom.storage.time_index import TimeIndex

BASE = 100


def _offset_file(path: Path, *entries: tuple[int, int]) -> Path:
    path.write_bytes(b"".join(struct.pack(">ii", rel, pos) for rel, pos in entries))
    return path


def _time_file(path: Path, *entries: tuple[int, int]) -> Path:
    path.write_bytes(b"".join(struct.pack(">qi", ts, rel) for ts, rel in entries))
    return path


def test_offset_index_loads_relative_offsets_as_absolute(tmp_path: Path) -> None:
    path = _offset_file(tmp_path / "a.index", (0, 0), (5, 300), (9, 700))
    index = OffsetIndex.load(path, BASE, 1024, log_size=800)
    assert len(index) == 3
    assert index.lookup(BASE - 1) == (BASE, 0)
    assert index.lookup(BASE + 7) == (BASE + 5, 300)
    assert index.lookup(10**9) == (BASE + 9, 700)
    assert index.last_entry == (BASE + 9, 700)
    assert index.position_floor(699) == 300


@pytest.mark.parametrize(
    "entries, log_size",
    [
        (((0, 0), (5, 300), (5, 400)), 800),  # offsets not increasing
        (((0, 0), (5, 300), (6, 300)), 800),  # positions not increasing
        (((-1, 0),), 800),  # below the base offset
        (((0, 0), (5, 800)), 800),  # position at the end of the log
    ],
)
def test_offset_index_sanity_checks(tmp_path: Path, entries, log_size: int) -> None:
    path = _offset_file(tmp_path / "a.index", *entries)
    with pytest.raises(CorruptIndexError):
        OffsetIndex.load(path, BASE, 1024, log_size)


def test_partial_entry_and_missing_file_are_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "a.index"
    path.write_bytes(b"\0" * 12)
    with pytest.raises(CorruptIndexError, match="multiple of 8"):
        OffsetIndex.load(path, BASE, 1024, 800)
    with pytest.raises(CorruptIndexError, match="missing"):
        TimeIndex.load(tmp_path / "none.timeindex", BASE)


def test_time_index_loads_and_checks_order(tmp_path: Path) -> None:
    path = _time_file(tmp_path / "a.timeindex", (1000, 0), (2000, 4), (2500, 9))
    index = TimeIndex.load(path, BASE)
    assert index.lookup(1000) is None
    assert index.lookup(2001) == BASE + 4
    assert index.last_entry == (2500, BASE + 9)
    bad = _time_file(tmp_path / "b.timeindex", (1000, 0), (2000, 4), (2000, 9))
    with pytest.raises(CorruptIndexError):
        TimeIndex.load(bad, BASE)


def test_truncation_and_reset_reach_the_file_at_once(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "a.index", BASE, 1024)
    for i in range(5):
        index.append(BASE + 2 * i, 100 * i)
    index.append(BASE + 8, 500)  # offset does not advance: ignored
    index.flush()
    assert (tmp_path / "a.index").stat().st_size == 5 * 8
    index.truncate_to_position(250)
    assert (tmp_path / "a.index").stat().st_size == 3 * 8
    assert index.last_entry == (BASE + 4, 200)
    times = TimeIndex(tmp_path / "a.timeindex", BASE)
    for i in range(4):
        times.maybe_append(1000 + i, BASE + 3 * i)
    times.close()
    times.truncate_to_offset(BASE + 6)
    assert TimeIndex.load(tmp_path / "a.timeindex", BASE).last_entry == (1001, BASE + 3)
    fresh = OffsetIndex(tmp_path / "a.index", BASE, 1024)  # an old file of the same name
    fresh.reset()
    assert (tmp_path / "a.index").stat().st_size == 0


def test_only_the_offset_index_is_bounded(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "a.index", BASE, 3 * 8)
    times = TimeIndex(tmp_path / "a.timeindex", BASE)
    for i in range(3):
        assert not index.is_full
        index.append(BASE + i, 10 * i)
        times.maybe_append(i, BASE + i)
    assert index.is_full and not times.is_full
