"""Transactional offset commits (TxnOffsetCommit) in the group coordinator: pending until the
producer's marker, published by COMMIT, dropped by ABORT, and rebuilt the same way from the
log (transactional batches wait for their marker while loading)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from strom.broker.group.coordinator import CoordinatorConfig, GroupCoordinator
from strom.broker.group.model import OffsetEntry
from strom.clock import FakeClock
from strom.protocol.errors import ErrorCode as E


class NoTimers:
    def call_later(self, delay_ms: int, fn: object) -> None:
        return None


def coordinator(clock: FakeClock, log: list[tuple[int, bytes, bytes | None]]) -> GroupCoordinator:
    coord = GroupCoordinator(CoordinatorConfig(), clock, NoTimers(), lambda p, r, d=None: None)  # type: ignore[arg-type]

    def append_txn(partition: int, records: list[tuple[bytes, bytes | None]], pid: int,
                   epoch: int, done: Callable[[E], None]) -> None:  # fmt: skip
        log.extend((pid, k, v) for k, v in records)
        done(E.none)  # replicated at once, as on a single node

    coord.append_txn = append_txn
    coord.finish_loading()
    return coord


def commit_txn(coord: GroupCoordinator, *args: Any) -> dict[tuple[str, int], E]:
    """TxnOffsetCommit's answer, given synchronously when the append completes at once."""
    out: list[dict[tuple[str, int], E]] = []
    coord.commit_txn_offsets(*args, out.append)
    assert len(out) == 1
    return out[0]


def test_offsets_visible_only_at_commit() -> None:
    clock = FakeClock(1_700_000_000_000)
    log: list[tuple[int, bytes, bytes | None]] = []
    coord = coordinator(clock, log)
    tp = ("in", 0)
    assert commit_txn(coord, "g", 7, 0, "", None, -1, {tp: OffsetEntry(10, -1, "")}) == {
        tp: E.none}  # fmt: skip
    assert commit_txn(coord, "g", 8, 0, "", None, -1, {tp: OffsetEntry(99, -1, "")}) == {
        tp: E.none}  # fmt: skip
    assert coord.fetch_offsets("g", [tp]) == {tp: None}
    assert coord.has_pending_txn_offset("g", tp)
    coord.complete_txn(8, commit=False)
    coord.complete_txn(7, commit=True)
    entry = coord.fetch_offsets("g", [tp])[tp]
    assert entry is not None and entry.offset == 10
    assert not coord.has_pending_txn_offset("g", tp)

    # loading: the same records, then the markers, give the same state
    again = GroupCoordinator(CoordinatorConfig(), clock, NoTimers(), lambda p, r, d=None: None)  # type: ignore[arg-type]
    for pid, key, value in log:
        again.replay_txn_offset(pid, key, value)
    again.complete_txn(8, commit=False)
    again.complete_txn(7, commit=True)
    again.finish_loading()
    loaded = again.fetch_offsets("g", [tp])[tp]
    assert loaded is not None and loaded.offset == 10


def test_zombie_member_generation_is_refused() -> None:
    clock = FakeClock(1_700_000_000_000)
    coord = coordinator(clock, [])
    tp = ("in", 0)
    assert commit_txn(coord, "g", 7, 0, "", None, -1, {tp: OffsetEntry(1, -1, "")}) == {
        tp: E.none}  # fmt: skip
    coord.complete_txn(7, commit=True)  # the group now exists (Empty, no members)
    assert commit_txn(coord, "g", 7, 0, "ghost", None, 3, {tp: OffsetEntry(2, -1, "")}) == {
        tp: E.unknown_member_id}  # fmt: skip
