"""Leader-epoch cache (``leader-epoch-checkpoint``): Kafka's endOffsetFor rules, truncation,
persistence, and how the log keeps it (issue 13 item 6)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from strom.clock import FakeClock
from strom.storage.batch_validation import AppendOrigin
from strom.storage.leader_epoch import FILE_NAME, LeaderEpochCache
from strom.storage.log import Log

from .conftest import batch

OpenLog = Callable[..., Log]


def test_end_offset_for_follows_kafka(tmp_path: Path) -> None:
    cache = LeaderEpochCache(tmp_path)
    assert cache.end_offset_for(0, 10) == (-1, -1)  # nothing known
    cache.assign(1, 0)
    cache.assign(3, 100)
    cache.assign(3, 150)  # not newer: ignored
    cache.assign(2, 120)  # older: ignored
    cache.assign(6, 200)
    assert cache.entries() == [(1, 0), (3, 100), (6, 200)]
    assert cache.end_offset_for(-1, 250) == (-1, -1)
    assert cache.end_offset_for(6, 250) == (6, 250)  # the latest: the log end offset
    assert cache.end_offset_for(3, 250) == (3, 200)
    assert cache.end_offset_for(4, 250) == (3, 200)  # unknown epoch: the one below it
    assert cache.end_offset_for(1, 250) == (1, 100)
    assert cache.end_offset_for(0, 250) == (0, 0)  # below every epoch: the first start
    assert cache.end_offset_for(7, 250) == (-1, -1)  # above every epoch
    assert [cache.epoch_for_offset(o) for o in (0, 99, 100, 199, 200, 999)] == [1, 1, 3, 3, 6, 6]
    # persisted in Kafka's text format, at the log's next flush (no fsync on the append path)
    assert not (tmp_path / FILE_NAME).exists()
    cache.flush()
    assert (tmp_path / FILE_NAME).read_text() == "0\n3\n1 0\n3 100\n6 200\n"
    again = LeaderEpochCache(tmp_path)
    assert again.load() and again.entries() == cache.entries()


def test_truncation(tmp_path: Path) -> None:
    cache = LeaderEpochCache(tmp_path)
    for epoch, start in ((0, 0), (2, 50), (5, 90)):
        cache.assign(epoch, start)
    cache.truncate_from_start(60)
    assert cache.entries() == [(2, 60), (5, 90)]
    cache.truncate_from_end(90)
    assert cache.entries() == [(2, 60)]
    cache.assign(7, 80)
    assert LeaderEpochCache(tmp_path).load()
    assert cache.entries() == [(2, 60), (7, 80)]
    (tmp_path / FILE_NAME).write_text("garbage")
    assert not LeaderEpochCache(tmp_path).load()


def test_log_keeps_the_cache(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log(segment_bytes=300)
    for _ in range(5):
        log.append(batch(clock, b"x" * 50), leader_epoch=0)
    assert log.leader_epochs.entries() == [(0, 0)]
    # a follower copying a newer leader's batches
    log.append(batch(clock, b"y", base_offset=5, partition_leader_epoch=3),
               origin=AppendOrigin.REPLICATION)  # fmt: skip
    log.append(batch(clock, b"z", base_offset=6, partition_leader_epoch=4),
               origin=AppendOrigin.REPLICATION)  # fmt: skip
    assert log.leader_epochs.entries() == [(0, 0), (3, 5), (4, 6)]
    log.truncate_to(6)
    assert log.leader_epochs.entries() == [(0, 0), (3, 5)]
    log.high_watermark = log.log_end_offset
    log.delete_records_before(2)
    assert log.leader_epochs.entries() == [(0, 2), (3, 5)]
    log.close()
    again = Log.open(log.dir, log.config, clock)
    assert again.leader_epochs.entries() == [(0, 2), (3, 5)]
    assert again.leader_epochs.end_offset_for(0, again.log_end_offset) == (0, 5)


def test_cache_rebuilt_from_batches_when_missing(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log()
    log.append(batch(clock, b"a"), leader_epoch=0)
    log.append(batch(clock, b"b", base_offset=1, partition_leader_epoch=2),
               origin=AppendOrigin.REPLICATION)  # fmt: skip
    log.close()
    (log.dir / FILE_NAME).unlink()
    again = Log.open(log.dir, log.config, clock)
    assert again.leader_epochs.entries() == [(0, 0), (2, 1)]
    again.flush()  # the rebuilt cache reaches the file at the next flush, not at open
    assert (log.dir / FILE_NAME).read_text() == "0\n2\n0 0\n2 1\n"
