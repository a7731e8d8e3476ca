"""SharePartition: acquisition, acknowledgement, locks and the in-flight window."""

from __future__ import annotations

import uuid

from strom.broker.share.partition import (
    ACCEPT,
    ACQUIRED,
    GAP,
    REJECT,
    RELEASE,
    RENEW,
    Acquired,
    FetchedBatch,
    Limits,
    SharePartition,
)
from strom.broker.share.state import ACKNOWLEDGED, ARCHIVED, AVAILABLE, Batch
from strom.protocol.errors import ErrorCode

TID = uuid.UUID(int=7)


def part(start: int = 0, batches: list[Batch] | None = None, **limits: int) -> SharePartition:
    return SharePartition("g", "t", TID, 0, leader_epoch=0, state_epoch=0, start_offset=start,
                          batches=batches or [], limits=Limits(**limits))


def batches(*ranges: tuple[int, int]) -> list[FetchedBatch]:
    return [FetchedBatch(a, b) for a, b in ranges]


def test_each_record_goes_to_one_member() -> None:
    sp = part()
    data = batches((0, 4), (5, 9))
    a = sp.acquire("m1", data, 5, now_ms=0)
    b = sp.acquire("m2", data, 5, now_ms=0)
    assert a == [Acquired(0, 4, 1)]
    assert b == [Acquired(5, 9, 1)]
    assert sp.acquire("m3", data, 5, now_ms=0) == []
    assert sp.acknowledge("m1", [(0, 4, [ACCEPT])], 0) == ErrorCode.none
    assert sp.spso == 5 and sp.speo == 10
    assert sp.acknowledge("m2", [(5, 9, [ACCEPT])], 0) == ErrorCode.none
    assert (sp.spso, sp.speo, sp.runs) == (10, 10, [])
    assert sp.stats.acknowledged == 10


def test_batch_optimized_acquisition_takes_whole_batches_record_limit_does_not() -> None:
    sp = part()
    assert sp.acquire("m", batches((0, 9)), 3, now_ms=0) == [Acquired(0, 9, 1)]
    sp2 = part()
    assert sp2.acquire("m", batches((0, 9)), 3, now_ms=0, strict=True) == [Acquired(0, 2, 1)]
    assert sp2.next_fetch_offset() == 3


def test_release_redelivers_with_a_higher_count_and_reject_never() -> None:
    sp = part()
    sp.acquire("m1", batches((0, 2)), 10, now_ms=0)
    assert sp.acknowledge("m1", [(0, 2, [ACCEPT, RELEASE, REJECT])], 0) == ErrorCode.none
    assert sp.state_of(0)[0] == ACKNOWLEDGED and sp.spso == 1
    assert sp.state_of(1)[:2] == (AVAILABLE, 1)
    assert sp.state_of(2)[0] == ARCHIVED
    again = sp.acquire("m2", batches((0, 2)), 10, now_ms=0)
    assert again == [Acquired(1, 1, 2)]
    assert sp.stats.redelivered == 1 and sp.stats.rejected == 1
    sp.acknowledge("m2", [(1, 1, [ACCEPT])], 0)
    assert sp.spso == 3 and sp.acquire("m3", batches((0, 2)), 10, now_ms=0) == []


def test_lock_expiry_releases_and_the_delivery_limit_archives() -> None:
    sp = part(lock_ms=100, delivery_limit=2)
    assert sp.acquire("m1", batches((0, 0)), 1, now_ms=0) == [Acquired(0, 0, 1)]
    assert sp.expire(99) == 0
    assert sp.expire(100) == 1
    assert sp.state_of(0)[:2] == (AVAILABLE, 1)
    assert sp.acquire("m2", batches((0, 0)), 1, now_ms=200) == [Acquired(0, 0, 2)]
    # a late acknowledgement of the first holder is refused
    assert sp.acknowledge("m1", [(0, 0, [ACCEPT])], 250) == ErrorCode.invalid_record_state
    assert sp.expire(300) == 1  # second delivery expired: the limit (2) archives it
    assert sp.spso == 1 and sp.stats.delivery_limit == 1 and sp.stats.lock_expiries == 2


def test_renew_restarts_the_lock() -> None:
    sp = part(lock_ms=100)
    sp.acquire("m", batches((0, 0)), 1, now_ms=0)
    assert sp.acknowledge("m", [(0, 0, [RENEW])], 90) == ErrorCode.none
    assert sp.expire(150) == 0 and sp.state_of(0)[0] == ACQUIRED
    assert sp.expire(190) == 1


def test_acknowledging_what_another_member_holds_changes_nothing() -> None:
    sp = part()
    sp.acquire("m1", batches((0, 1)), 1, now_ms=0)
    sp.acquire("m2", batches((2, 3)), 1, now_ms=0)
    assert sp.acknowledge("m1", [(0, 1, [ACCEPT]), (2, 2, [ACCEPT])], 0) == ErrorCode.invalid_record_state
    assert sp.state_of(0)[0] == ACQUIRED and sp.state_of(2)[0] == ACQUIRED
    assert sp.acknowledge("m1", [(5, 6, [ACCEPT])], 0) == ErrorCode.invalid_record_state
    assert sp.acknowledge("m1", [(0, 1, [ACCEPT, ACCEPT, ACCEPT])], 0) == ErrorCode.invalid_request
    assert sp.acknowledge("m1", [(0, 1, [9])], 0) == ErrorCode.invalid_request


def test_gaps_are_archived_and_control_batches_never_acquired() -> None:
    sp = part()
    got = sp.acquire("m", [FetchedBatch(0, 1), FetchedBatch(2, 2, skip=True), FetchedBatch(5, 6)],
                     10, now_ms=0)
    assert got == [Acquired(0, 1, 1), Acquired(5, 6, 1)]
    assert sp.state_of(2)[0] == ARCHIVED and sp.state_of(3)[0] == ARCHIVED
    sp.acknowledge("m", [(0, 1, [ACCEPT, GAP])], 0)
    sp.acknowledge("m", [(5, 6, [ACCEPT])], 0)
    assert sp.spso == 7 and sp.done_count() == 0


def test_the_window_is_bounded_by_max_record_locks() -> None:
    sp = part(max_locks=4)
    assert sp.acquire("m1", batches((0, 1), (2, 3), (4, 5)), 10, now_ms=0) == [Acquired(0, 3, 1)]
    assert sp.next_fetch_offset() is None
    sp.acknowledge("m1", [(0, 1, [ACCEPT])], 0)
    assert sp.next_fetch_offset() == 4
    assert sp.acquire("m2", batches((4, 5)), 10, now_ms=0) == [Acquired(4, 5, 1)]


def test_a_closed_session_releases_its_member_only() -> None:
    sp = part()
    sp.acquire("m1", batches((0, 4)), 5, now_ms=0)
    sp.acquire("m2", batches((5, 9)), 5, now_ms=0)
    assert sp.release_member("m1") == 5
    assert sp.acquired_count() == 5 and sp.acquired_count("m2") == 5
    assert sp.acquire("m3", batches((0, 4), (5, 9)), 10, now_ms=0) == [Acquired(0, 4, 2)]


def test_persisted_state_shows_in_flight_records_as_available_and_reloads() -> None:
    sp = part(start=10)
    sp.acquire("m", batches((10, 14), (15, 19)), 10, now_ms=0)
    sp.acknowledge("m", [(12, 12, [ACCEPT]), (13, 13, [REJECT])], 0)
    start, state, done = sp.persisted()
    assert start == 10 and done == 2
    assert state == [Batch(10, 11, AVAILABLE, 1), Batch(12, 12, ACKNOWLEDGED, 1),
                     Batch(13, 13, ARCHIVED, 1), Batch(14, 19, AVAILABLE, 1)]
    again = part(start=start, batches=state)
    assert (again.spso, again.speo) == (10, 20)
    assert again.acquire("n", batches((10, 19)), 100, now_ms=0) == [Acquired(10, 11, 2), Acquired(14, 19, 2)]


def test_loading_fills_gaps_and_skips_done_batches_at_the_front() -> None:
    sp = part(start=0, batches=[Batch(0, 2, ACKNOWLEDGED, 1), Batch(5, 5, ARCHIVED, 3)])
    assert sp.spso == 3 and sp.speo == 6
    assert sp.state_of(3) == (AVAILABLE, 0, None) and sp.state_of(5)[0] == ARCHIVED
    assert sp.acquire("m", batches((0, 9)), 100, now_ms=0) == [Acquired(3, 4, 1), Acquired(6, 9, 1)]


def test_move_start_drops_offsets_the_log_lost() -> None:
    sp = part()
    sp.acquire("m", batches((0, 9)), 10, now_ms=0)
    sp.move_start(5)
    assert sp.spso == 5 and sp.runs[0].first == 5 and sp.acquired_count() == 5
