"""The one read path (``storage/read_path.py``) against the rules it replaced.

The reference below is the previous implementation's algorithm, written out independently:
read the whole segment file, walk every batch header from the first one, take whole batches.
``Log.read`` (copying), ``zero_copy.read_region`` (sendfile) and ``Log.read_region`` must
select exactly the same bytes for every combination of offset, max_bytes, upper bound and
min_one_batch, on logs with small and large batches, several segments, sparse and dense
indexes, offset gaps (compacted logs) and a log start moved by DeleteRecords.
"""

from __future__ import annotations

import bisect
import os
import random
from pathlib import Path

import pytest

from strom.broker import zero_copy
from strom.clock import FakeClock
from strom.protocol.record_batch import (
    HEADER_SIZE,
    build_batch,
    build_batch_from_records,
    decode_records,
    iter_batches,
    walk_headers,
)
from strom.protocol.records import Record
from strom.storage import read_path
from strom.storage.batch_validation import AppendOrigin
from strom.storage.log import Log
from strom.storage.log_config import LogConfig


def reference_read(log: Log, offset: int, max_bytes: int, max_offset: int | None,
                   min_one: bool) -> bytes:  # fmt: skip
    """What the previous ``Log.read`` returned (every header walked, whole batches)."""
    segments = log.segments
    i = max(0, bisect.bisect_right([s.base_offset for s in segments], offset) - 1)
    for seg in segments[i:]:
        data = seg.path.read_bytes()[: seg.size]
        pos = 0
        start = -1
        taken = 0
        for header, view in iter_batches(data):
            size = len(view)
            if start < 0:
                if header.last_offset < offset:
                    pos += size
                    continue
                start = pos
            if max_offset is not None and header.base_offset >= max_offset:
                break
            if taken + size > max_bytes and not (taken == 0 and min_one):
                break
            taken += size
        if start < 0:
            continue
        return data[start : start + taken]
    return b""


def _fill(log: Log, clock: FakeClock, rng: random.Random, batches: int) -> None:
    for _ in range(batches):
        n = rng.choice([1, 1, 3, 20])
        size = rng.choice([10, 100, 900, 9000])
        log.append(build_batch([(b"k", os.urandom(size), [], clock.time_ms())] * n))


def _check_all(log: Log, rng: random.Random, samples: int = 40) -> int:
    end = log.log_end_offset
    start = log.log_start_offset
    offsets = {start, start + 1, end - 1, end, *rng.sample(range(start, end), min(samples, end - start))}
    checked = 0
    for offset in sorted(o for o in offsets if start <= o <= end):
        for max_bytes in (0, 1, 60, 61, 1000, 5000, 12_000, 30_000, 1 << 20):
            for max_offset in (None, end, end - 3, offset, offset + 1, offset + 7):
                for min_one in (True, False):
                    want = reference_read(log, offset, max_bytes, max_offset, min_one)
                    got = log.read(offset, max_bytes, max_offset=max_offset, min_one_batch=min_one)
                    assert got.records == want, (offset, max_bytes, max_offset, min_one)
                    if want:
                        assert got.first_offset == next(iter_batches(want))[0].base_offset
                    for copy_below in (0, zero_copy.COPY_BELOW):  # a file region; bytes if small
                        region = zero_copy.read_region(log, offset, max_bytes, max_offset=max_offset,
                                                       min_one_batch=min_one, copy_below=copy_below)  # fmt: skip
                        if region is None:
                            assert want == b""
                        elif isinstance(region, bytes):
                            assert len(want) < copy_below
                            assert region == want
                        else:
                            assert len(want) >= copy_below
                            try:
                                assert zero_copy.materialize([region]) == want
                            finally:
                                region.close()
                    checked += 1
    return checked


@pytest.mark.parametrize("interval", [1, 500, 4096, 1 << 20])
def test_same_bytes_as_the_header_walk(tmp_path: Path, interval: int) -> None:
    clock = FakeClock()
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=60_000, index_interval_bytes=interval), clock)
    rng = random.Random(interval)
    _fill(log, clock, rng, 300)
    assert len(log.segments) > 3
    assert _check_all(log, rng) > 1000
    log.high_watermark = log.log_end_offset
    log.delete_records_before(log.log_end_offset // 3)  # a start offset inside a segment
    _check_all(log, rng)
    log.close()


def test_same_bytes_with_offset_gaps(tmp_path: Path) -> None:
    """Batches whose offsets leave gaps (what compaction leaves behind)."""
    clock = FakeClock()
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=20_000, index_interval_bytes=300), clock)
    rng = random.Random(3)
    offset = 0
    for _ in range(200):
        count = rng.choice([1, 2, 5])
        offset += rng.choice([0, 0, 1, 10])
        recs = [Record(offset + i, clock.time_ms(), b"k", os.urandom(rng.choice([50, 700])), ())
                for i in range(count)]  # fmt: skip
        log.append(build_batch_from_records(recs, base_offset=offset, last_offset_delta=count - 1 + rng.choice([0, 3])),
                   origin=AppendOrigin.REPLICATION)  # fmt: skip
        offset = log.log_end_offset
    _check_all(log, rng, samples=80)
    log.close()


def test_reads_only_headers_near_the_index_entries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Locating a slice reads a few KiB however large the segment and the slice are."""
    clock = FakeClock()
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=1 << 30), clock)
    for _ in range(2000):
        log.append(build_batch([(b"k", b"v" * 1000, [], clock.time_ms())] * 10))  # ~10 KB batches
    assert len(log.segments) == 1 and log.size > 20_000_000
    read = []
    real_pread = os.pread

    def counting(fd: int, n: int, pos: int) -> bytes:
        data = real_pread(fd, n, pos)
        read.append(len(data))
        return data

    monkeypatch.setattr(read_path.fileio, "pread", counting)
    for offset, max_bytes, bound in ((5000, 8 << 20, None), (5000, 8 << 20, 15000), (0, 1 << 30, 20000)):
        read.clear()
        found = log.read_region(offset, max_bytes, max_offset=bound)
        assert found is not None and found.length > 1_000_000
        assert len(read) <= 6 and sum(read) <= 6 * read_path.SEEK_CHUNK, read  # of > 1 MB
    monkeypatch.undo()
    data = log.read(5000, 8 << 20, max_offset=15000).records
    offsets = [r.offset for _h, b in iter_batches(data) for r in decode_records(b)]
    assert offsets[0] == 5000 and offsets[-1] < 15000 and len(data) <= 8 << 20
    log.close()


def test_walk_headers_stops_on_a_bad_length() -> None:
    batch = build_batch([(b"k", b"v", [], 1)])
    bad = bytearray(batch)
    bad[8:12] = (-5).to_bytes(4, "big", signed=True)
    walked = list(walk_headers(batch + bytes(bad) + batch))
    assert [p for p, _h in walked] == [0, len(batch)]  # the bad one is yielded, then the end
    assert list(walk_headers(batch[: HEADER_SIZE - 1])) == []
