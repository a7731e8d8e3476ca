"""The sink task's offset bookkeeping: what may be committed after each kind of event."""

from __future__ import annotations

from strom.connect.sink_offsets import SinkOffsets

A, B = ("t", 0), ("t", 1)


def test_only_a_batch_whose_put_returned_counts() -> None:
    offsets = SinkOffsets()
    offsets.consumed(A, 10)
    offsets.consumed(A, 11)
    offsets.delivered()
    offsets.consumed(A, 12)  # converted; the next record fails, put is never called
    assert offsets.requested([A, B]) == {A: 12}
    offsets.drop_batch()
    offsets.delivered()  # nothing left in the batch: nothing moves
    assert offsets.requested([A]) == {A: 12}


def test_a_batch_waiting_for_redelivery_is_not_committable() -> None:
    offsets = SinkOffsets()
    offsets.consumed(A, 0)
    offsets.consumed(B, 5)
    assert offsets.requested([A, B]) == {}
    offsets.drop_batch([B])  # B revoked while the batch waited
    offsets.delivered()
    assert offsets.requested([A, B]) == {A: 1}


def test_pre_commit_answers_are_checked() -> None:
    offsets = SinkOffsets()
    for o in range(3):
        offsets.consumed(A, o)
    offsets.consumed(B, 7)
    offsets.delivered()
    requested = offsets.requested([A])  # B not asked about (e.g. not being revoked)
    commit, ignored = offsets.committable(requested, {A: 5, B: 8})
    assert commit == {} and len(ignored) == 2  # beyond what was delivered; not requested
    commit, ignored = offsets.committable(requested, {A: 2})
    assert commit == {A: 2} and ignored == []
    offsets.commit_done(commit)
    assert offsets.committable(requested, {A: 2}) == ({}, [])  # unchanged: no commit
    assert offsets.committable(offsets.requested([A, B]), {}) == ({}, [])  # task opted out


def test_failed_flush_rewinds_to_the_last_commit_or_the_first_position() -> None:
    offsets = SinkOffsets()
    offsets.consumed(A, 4)  # first read after the assignment: where A started
    offsets.consumed(B, 9)
    offsets.delivered()
    offsets.commit_done({B: 10})
    offsets.consumed(B, 10)
    offsets.delivered()
    assert offsets.rewind([A, B]) == {A: 4, B: 10}
    assert offsets.requested([A, B]) == {A: 4, B: 10}


def test_forgotten_partitions_start_over() -> None:
    offsets = SinkOffsets()
    offsets.consumed(A, 0)
    offsets.delivered()
    offsets.consumed(A, 1)
    offsets.forget([A])
    offsets.delivered()
    assert offsets.requested([A]) == {} and offsets.rewind([A]) == {}
    offsets.consumed(A, 3)  # assigned again, from the committed offset
    assert offsets.rewind([A]) == {A: 3}
