"""strom.broker.internal_log_replay: the walk both coordinators load their partitions with."""

from __future__ import annotations

from pathlib import Path

import pytest

from strom.broker.internal_log_replay import replay
from strom.clock import FakeClock
from strom.protocol.control import build_marker
from strom.protocol.record_batch import build_batch
from strom.storage.batch_validation import AppendOrigin
from strom.storage.log import Log
from strom.storage.log_config import LogConfig

# the record walks run on the native codec and on its pure-Python fallback
pytestmark = pytest.mark.usefixtures("record_codec")


@pytest.fixture
def log_(tmp_path: Path) -> Log:
    clock = FakeClock(1_700_000_000_000)
    log = Log.open(tmp_path / "__consumer_offsets-0", LogConfig(segment_bytes=300), clock)  # type: ignore[arg-type]
    now = clock.time_ms()
    log.append(build_batch([(b"k0", b"v0", [], now), (b"k1", b"v1", [], now)]))  # 0-1
    log.append(build_batch([(None, b"no key", [], now), (b"k3", None, [], now)]))  # 2-3
    log.append(build_batch([(b"t4", b"v4", [], now)], producer_id=7, producer_epoch=0,
                           base_sequence=0, is_transactional=True))  # 4  # fmt: skip
    log.append(build_marker(7, 0, commit=False, coordinator_epoch=1, timestamp_ms=now),
               origin=AppendOrigin.COORDINATOR)  # 5  # fmt: skip
    for i in range(6, 12):  # several segments, three records a batch
        if i % 3 == 0:
            log.append(build_batch([(b"k%d" % j, b"v%d" % j, [], now) for j in range(i, i + 3)]))
    log.high_watermark = log.log_end_offset
    return log


def rows(log: Log, **kw: object) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(e.offset, e.key, e.value) for e in replay(log, **kw)]  # type: ignore[arg-type]


def test_every_keyed_record_in_order_without_controls(log_: Log) -> None:
    assert len(log_.segments) > 1
    want = [(0, b"k0", b"v0"), (1, b"k1", b"v1"), (3, b"k3", None), (4, b"t4", b"v4")]
    want += [(i, b"k%d" % i, b"v%d" % i) for i in range(6, 12)]
    assert rows(log_) == want
    assert rows(log_, chunk_bytes=1) == want  # one batch a read: same records, none twice


def test_controls_carry_the_marker_and_headers_the_flags(log_: Log) -> None:
    entries = list(replay(log_, controls=True))
    control = [e for e in entries if e.is_control]
    assert [(e.offset, e.key, e.value, e.header.producer_id) for e in control] == [(5, None, None, 7)]
    assert control[0].marker is not None and control[0].marker.commit is False
    assert control[0].marker.coordinator_epoch == 1
    txn = [e.offset for e in entries if e.header.is_transactional and not e.is_control]
    assert txn == [4]
    assert [e.offset for e in entries] == sorted({e.offset for e in entries})


def test_bounds_start_offset_and_end(log_: Log) -> None:
    assert [o for o, _k, _v in rows(log_, end=8)] == [0, 1, 3, 4, 6, 7]  # stops mid-batch
    assert rows(log_, end=0) == []
    log_.delete_records_before(7)  # the log start now falls inside the batch 6-8
    assert [o for o, _k, _v in rows(log_)] == [7, 8, 9, 10, 11]
