"""The ``.index`` / ``.timeindex`` on-disk format is the one strom wrote before the shared index
base (commit c8bda74): files that code wrote are read as written, without a rebuild, and the
same workload writes the same bytes today.

``data/indexes_c8bda74/`` holds the segments of :func:`workload` as c8bda74's code wrote them
(``.log``, ``.index``, ``.timeindex``; three segments, bases 0, 25 and 45).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from strom.clock import FakeClock
from strom.protocol.record_batch import build_batch
from strom.storage.index import OffsetIndex
from strom.storage.log import Log
from strom.storage.log_config import LogConfig
from strom.storage.segment import LogSegment
from strom.storage.time_index import TimeIndex

GOLDEN = Path(__file__).parent / "data" / "indexes_c8bda74"
BASES = (0, 25, 45)
CONFIG = LogConfig(index_interval_bytes=1, segment_bytes=1500)
NOW = 1_700_000_000_000


def workload(dir: Path) -> None:
    """24 batches of 1-3 records, timestamps going up and down (the time index keeps only
    running maxima), an index entry per batch, segments of at most 1500 bytes."""
    clock = FakeClock(NOW)
    log = Log.open(dir, CONFIG, clock)
    for i in range(24):
        ts = clock.time_ms() + (i * 37) % 11 * 1000
        n = 1 + i % 3
        log.append(build_batch([(b"k%d" % i, b"v" * (10 + i), [], ts + j) for j in range(n)]))
        clock.advance(5)
    log.close()


def _entries(index: OffsetIndex | TimeIndex, base: int, end: int) -> list[object]:
    if isinstance(index, OffsetIndex):
        return [index.lookup(o) for o in range(base - 1, end + 2)]
    return [index.lookup(NOW + t) for t in range(-1, 12_000, 250)]


def test_index_files_written_by_c8bda74_are_read_as_written(tmp_path: Path) -> None:
    for name in GOLDEN.iterdir():
        shutil.copy(name, tmp_path / name.name)
    looked_up = 0
    for base in BASES:
        index_file = tmp_path / f"{base:020d}.index"
        time_file = tmp_path / f"{base:020d}.timeindex"
        index_bytes, time_bytes = index_file.read_bytes(), time_file.read_bytes()
        seg = LogSegment.open(tmp_path, base, CONFIG, NOW)
        # loaded, not rebuilt: a corrupt index would have been deleted and rebuilt in memory
        assert index_file.read_bytes() == index_bytes and time_file.read_bytes() == time_bytes
        assert len(seg.index) == len(index_bytes) // 8
        assert len(seg.time_index) == len(time_bytes) // 12
        loaded = (_entries(seg.index, base, seg.next_offset),
                  _entries(seg.time_index, base, seg.next_offset), seg.time_index.last_entry)  # fmt: skip
        summary = (seg.next_offset, seg.max_timestamp, seg.offset_of_max_timestamp)
        seg.recover()  # both indexes rebuilt from the .log
        seg.on_inactive()
        assert (_entries(seg.index, base, seg.next_offset),
                _entries(seg.time_index, base, seg.next_offset),
                seg.time_index.last_entry) == loaded  # fmt: skip
        assert (seg.next_offset, seg.max_timestamp, seg.offset_of_max_timestamp) == summary
        seg.flush()  # rewritten whole by today's code: the same bytes
        seg.close()
        assert index_file.read_bytes() == index_bytes
        assert time_file.read_bytes() == time_bytes
        looked_up += len(loaded[0])
    assert looked_up > 40


def test_the_same_workload_writes_the_same_bytes(tmp_path: Path) -> None:
    workload(tmp_path / "t-0")
    for base in BASES:
        for ext in (".log", ".index", ".timeindex"):
            name = f"{base:020d}{ext}"
            assert (tmp_path / "t-0" / name).read_bytes() == (GOLDEN / name).read_bytes(), name
