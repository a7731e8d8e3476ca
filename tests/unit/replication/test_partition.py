"""Partition state with the fake clock: roles, epochs, HW, ISR shrink/expand decisions."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from strom.clock import FakeClock
from strom.protocol.errors import ErrorCode
from strom.protocol.record_batch import build_batch
from strom.replication.delayed_produce import DelayedProducePurgatory
from strom.replication.partition import Partition
from strom.storage.log import Log
from strom.storage.log_config import LogConfig

LAG_MS = 30_000


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_700_000_000_000)


@pytest.fixture
def log(tmp_path: Path, clock: FakeClock) -> Log:
    return Log.open(tmp_path / "t-0", LogConfig(), clock)


def _append(part: Partition, n: int = 1) -> int:
    """Append ``n`` records as the leader; the new log end offset."""
    records = build_batch([(b"k", b"v%d" % i, [], 0) for i in range(n)])
    part.log.append(records, leader_epoch=part.leader_epoch)
    return part.log.log_end_offset


def _leader(log: Log, clock: FakeClock, isr: tuple[int, ...] = (1, 2, 3)) -> Partition:
    part = Partition("t", 0, log, 1, clock)
    part.make_leader(leader_epoch=3, partition_epoch=7, replicas=(1, 2, 3), isr=isr)
    return part


def test_becoming_leader_records_the_epoch_start(log: Log, clock: FakeClock) -> None:
    part = Partition("t", 0, log, 1, clock)
    part.make_leader(leader_epoch=0, partition_epoch=0, replicas=(1,), isr=(1,))
    _append(part, 4)
    assert part.make_leader(leader_epoch=2, partition_epoch=1, replicas=(1,), isr=(1,))
    assert log.leader_epochs.entries() == [(0, 0), (2, 4)]
    assert not part.make_leader(leader_epoch=2, partition_epoch=2, replicas=(1,), isr=(1,))
    _append(part)
    assert log.leader_epochs.latest_epoch == 2
    assert part.leader_epoch_start == 4


def test_alone_in_the_isr_the_hw_follows_the_log_end(log: Log, clock: FakeClock) -> None:
    part = _leader(log, clock, isr=(1,))
    end = _append(part, 3)
    assert part.maybe_advance_hw() and log.high_watermark == end == 3


def test_hw_is_the_smallest_log_end_of_the_isr_and_never_goes_back(log: Log,
                                                                   clock: FakeClock) -> None:  # fmt: skip
    part = _leader(log, clock)
    _append(part, 10)
    assert not part.maybe_advance_hw() and log.high_watermark == 0  # followers unknown yet
    assert not part.update_follower(2, 6)
    assert part.update_follower(3, 4) and log.high_watermark == 4
    assert part.update_follower(3, 10) and log.high_watermark == 6
    assert part.update_follower(2, 10) and log.high_watermark == 10
    assert not part.update_follower(2, 5)  # a follower that truncated: the HW stays
    assert log.high_watermark == 10


def test_check_leader_epoch(log: Log, clock: FakeClock) -> None:
    part = _leader(log, clock)
    assert part.check_leader_epoch(-1) == ErrorCode.none
    assert part.check_leader_epoch(3) == ErrorCode.none
    assert part.check_leader_epoch(2) == ErrorCode.fenced_leader_epoch
    assert part.check_leader_epoch(4) == ErrorCode.unknown_leader_epoch


def test_a_follower_that_stops_catching_up_is_dropped_after_the_lag(log: Log,
                                                                    clock: FakeClock) -> None:  # fmt: skip
    part = _leader(log, clock)
    _append(part, 5)
    part.update_follower(2, 5)
    part.update_follower(3, 5)
    assert part.out_of_sync_replicas(LAG_MS) == []
    _append(part, 5)  # end offset 10
    clock.advance(10_000)
    part.update_follower(2, 10)  # caught up now
    # behind, but it reached the leader's end offset as of its previous fetch (5): caught up
    # as of that fetch's time (Kafka's rule), not now
    part.update_follower(3, 7)
    clock.advance(15_000)
    assert part.out_of_sync_replicas(LAG_MS) == []
    clock.advance(10_000)  # 35 s after 3's last catch-up, 25 s after 2's
    assert part.out_of_sync_replicas(LAG_MS) == [3]


def test_a_follower_fetching_but_always_behind_is_out_of_sync(log: Log, clock: FakeClock) -> None:
    part = _leader(log, clock, isr=(1, 2))
    for _ in range(40):  # the leader grows faster than follower 2 fetches
        _append(part, 10)
        part.update_follower(2, part.log.log_end_offset - 20 if part.log.log_end_offset > 20 else 0)
        clock.advance(1_000)
    assert part.out_of_sync_replicas(LAG_MS) == [2]


def test_isr_followers_get_the_lag_time_from_the_election(log: Log, clock: FakeClock) -> None:
    part = _leader(log, clock)
    clock.advance(LAG_MS - 1)
    assert part.out_of_sync_replicas(LAG_MS) == []
    clock.advance(2)
    assert part.out_of_sync_replicas(LAG_MS) == [2, 3]


def test_a_follower_joins_at_the_hw_and_the_epoch_start(log: Log, clock: FakeClock) -> None:
    part = Partition("t", 0, log, 1, clock)
    part.make_follower(3, 1, 0, (1, 2, 3), (1, 3))
    log.append(build_batch([(b"k", b"v", [], 0)] * 4), leader_epoch=1)
    part.follower_high_watermark(0)
    part.make_leader(leader_epoch=2, partition_epoch=1, replicas=(1, 2, 3), isr=(1, 3))
    assert part.leader_epoch_start == 4 and log.high_watermark == 0  # 3's end is unknown
    part.update_follower(2, 2)
    assert not part.can_join_isr(2)  # at the HW, but not at the start of the leader's epoch
    part.update_follower(2, 4)
    assert part.can_join_isr(2)
    assert not part.can_join_isr(3)  # already in


def test_pending_isr_change_uses_the_maximal_isr_for_the_hw(log: Log, clock: FakeClock) -> None:
    part = _leader(log, clock)
    _append(part, 10)
    part.update_follower(2, 10)
    part.update_follower(3, 2)
    assert log.high_watermark == 2
    part.propose_isr((1, 2))  # shrink: 3 still counts for the HW until the controller agrees
    assert part.maximal_isr == (1, 2, 3) and part.minimal_isr == (1, 2)
    assert not part.maybe_advance_hw() and log.high_watermark == 2
    part.apply_isr((1, 2), leader_epoch=3, partition_epoch=8)
    assert part.isr == (1, 2) and part.pending is None and part.partition_epoch == 8
    assert log.high_watermark == 10


def test_pending_expansion_counts_the_joiner_before_it_is_committed(log: Log,
                                                                    clock: FakeClock) -> None:  # fmt: skip
    part = _leader(log, clock, isr=(1,))
    _append(part, 5)
    assert part.maybe_advance_hw() and log.high_watermark == 5
    part.update_follower(2, 5)
    part.propose_isr((1, 2))
    assert part.maximal_isr == (1, 2) and part.minimal_isr == (1,)
    _append(part, 5)
    assert not part.maybe_advance_hw()  # 2 is at 5: the HW waits for it
    part.update_follower(2, 10)
    assert log.high_watermark == 10


def test_follower_hw_is_capped_by_its_own_log_end(log: Log, clock: FakeClock) -> None:
    part = Partition("t", 0, log, 2, clock)
    assert part.make_follower(1, 3, 0, (1, 2), (1, 2))
    assert not part.make_follower(1, 3, 1, (1, 2), (1, 2))  # same leader and epoch
    log.append(build_batch([(b"k", b"v", [], 0)] * 3), leader_epoch=3)
    part.follower_high_watermark(100)
    assert log.high_watermark == 3
    part.follower_high_watermark(1)
    assert log.high_watermark == 1
    assert not part.is_leader and part.maybe_advance_hw() is False


def test_delayed_produce_completes_in_offset_order() -> None:
    async def run() -> None:
        delayed = DelayedProducePurgatory()
        key = ("t", 0)
        first, second = delayed.watch(key, 4), delayed.watch(key, 9)
        assert delayed.complete(key, 5, ErrorCode.none) == 1
        assert first.result() == ErrorCode.none and not second.done()
        assert delayed.complete(key, 9, ErrorCode.none) == 0  # HW 9: offset 9 not in yet
        delayed.fail_all(key, ErrorCode.not_leader_or_follower)
        assert second.result() == ErrorCode.not_leader_or_follower
        assert delayed.waiting(key) == 0

    asyncio.run(run())
