"""One share-partition at its partition's leader: acquisition, locks, acknowledgements.

Kafka's ``SharePartition`` as a sans-IO state machine (times are passed in, nothing is awaited).
The *in-flight window* is the offsets ``[spso, speo)``: the share-partition start offset (every
offset below it is done) up to the end offset (the next offset never delivered). The window is
kept as sorted, contiguous :class:`Run` s — ranges of offsets in one state:

- AVAILABLE (0): may be acquired; ``count`` deliveries so far;
- ACQUIRED (1): locked by ``member`` until ``deadline`` (ms); ``count`` includes this delivery;
- ACKNOWLEDGED (2): accepted, done;
- ARCHIVED (4): rejected, delivered ``delivery.count.limit`` times, a gap (no record at that
  offset: compaction, a control record) or an aborted transaction's record — done, never
  delivered again.

Invariants: the runs cover exactly ``[spso, speo)`` with no overlap; the first run is never
ACKNOWLEDGED or ARCHIVED (the start advances past done runs at once); ``speo - spso`` grows only
while below ``max_locks`` (``share.partition.max.record.locks``; a batch-aligned acquisition
may pass it by the rest of one batch); an offset is ACQUIRED by at most one member.

Transitions: acquisition (AVAILABLE → ACQUIRED, count+1; new offsets past ``speo`` enter
ACQUIRED with count 1, or ARCHIVED for control and aborted batches); ACCEPT → ACKNOWLEDGED;
REJECT and GAP → ARCHIVED; RELEASE, lock expiry and the member's session closing → AVAILABLE, or
ARCHIVED once ``count`` reached the delivery limit; RENEW (ShareFetch/ShareAcknowledge v2)
restarts the lock. An acknowledgement names offsets this member holds, or the whole
acknowledgement is INVALID_RECORD_STATE and nothing changes.

What is persisted (:meth:`persisted`) is the start offset and the non-trivial runs, ACQUIRED
shown as AVAILABLE with its count: after a crash, whatever was in flight is delivered again.
"""

from __future__ import annotations

import uuid
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from strom.broker.share.state import ACKNOWLEDGED, ARCHIVED, AVAILABLE, Batch
from strom.protocol.errors import ErrorCode

ACQUIRED = 1
DONE = (ACKNOWLEDGED, ARCHIVED)
# acknowledge types (ShareFetch/ShareAcknowledge)
GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4
STATE_NAMES = {AVAILABLE: "Available", ACQUIRED: "Acquired", ACKNOWLEDGED: "Acknowledged",
               ARCHIVED: "Archived"}  # fmt: skip


class FetchedBatch(NamedTuple):
    """A record batch the log returned: its offsets, and whether its records are never
    delivered (a control batch, or data of an aborted transaction under read_committed)."""

    base_offset: int
    last_offset: int
    skip: bool = False


class Acquired(NamedTuple):
    first: int
    last: int
    deliveries: int


@dataclass(slots=True)
class Run:
    first: int
    last: int
    state: int
    count: int
    member: str | None = None
    deadline: int = 0

    def __len__(self) -> int:
        return self.last - self.first + 1


@dataclass(slots=True)
class Stats:
    """Counters since this share-partition was loaded here (the metrics add them up)."""

    acquired: int = 0  # records handed out (redeliveries included)
    redelivered: int = 0  # of which with a delivery count above 1
    acknowledged: int = 0
    released: int = 0  # by RELEASE
    rejected: int = 0  # by REJECT
    archived: int = 0  # records archived for any reason (rejects, delivery limit, gaps)
    lock_expiries: int = 0  # records whose lock ran out
    delivery_limit: int = 0  # records archived because they reached the delivery limit


@dataclass(slots=True)
class Limits:
    """The group's settings in force (group configs over broker defaults)."""

    lock_ms: int = 30_000
    delivery_limit: int = 5
    max_locks: int = 2000


class SharePartition:
    def __init__(self, group: str, topic: str, topic_id: uuid.UUID, index: int, *,
                 leader_epoch: int, state_epoch: int, start_offset: int,
                 batches: Iterable[Batch] = (), limits: Limits | None = None) -> None:  # fmt: skip
        self.group = group
        self.topic = topic
        self.topic_id = topic_id
        self.index = index
        self.leader_epoch = leader_epoch
        self.state_epoch = state_epoch
        self.limits = limits or Limits()
        self.stats = Stats()
        #: bumped by every change that must be persisted (the writer compares it)
        self.changes = 0
        self.spso = max(start_offset, 0)
        self.runs: list[Run] = []
        for b in sorted(batches):
            if b.last < self.spso or b.state not in (AVAILABLE, ACKNOWLEDGED, ARCHIVED):
                continue
            first = max(b.first, self.spso)
            end = self.runs[-1].last + 1 if self.runs else self.spso
            if first > end:  # offsets no batch covers: never delivered
                self.runs.append(Run(end, first - 1, AVAILABLE, 0))
            elif first < end:
                continue  # overlapping input: the earlier batch wins
            self.runs.append(Run(first, b.last, b.state, b.deliveries))
        self.speo = self.runs[-1].last + 1 if self.runs else self.spso
        self._merge()
        self._advance()
        self.changes = 0  # the state as loaded is the persisted one

    # --- queries ---------------------------------------------------------------------------------
    def in_flight(self) -> int:
        return self.speo - self.spso

    def acquired_count(self, member: str | None = None) -> int:
        return sum(len(r) for r in self.runs
                   if r.state == ACQUIRED and (member is None or r.member == member))  # fmt: skip

    def done_count(self) -> int:
        """Offsets of the window acknowledged or archived (KIP-1226's delivery-complete count)."""
        return sum(len(r) for r in self.runs if r.state in DONE)

    def next_fetch_offset(self) -> int | None:
        """Where a fetch must read from: the first available offset in the window, else the
        end offset; None when nothing can be acquired (no available offset, the window full)."""
        for r in self.runs:
            if r.state == AVAILABLE:
                return r.first
        if self.speo - self.spso >= self.limits.max_locks:
            return None
        return self.speo

    def next_deadline(self) -> int | None:
        deadlines = [r.deadline for r in self.runs if r.state == ACQUIRED]
        return min(deadlines) if deadlines else None

    def state_of(self, offset: int) -> tuple[int, int, str | None]:
        """(state, delivery count, member) of ``offset``: below the start ACKNOWLEDGED (done),
        at or past the end AVAILABLE with no delivery."""
        if offset < self.spso:
            return ACKNOWLEDGED, 0, None
        if offset >= self.speo:
            return AVAILABLE, 0, None
        r = self.runs[self._index(offset)]
        return r.state, r.count, r.member

    # --- acquisition -------------------------------------------------------------------------------
    def acquire(self, member: str, fetched: Sequence[FetchedBatch], max_records: int,
                now_ms: int, *, strict: bool = False) -> list[Acquired]:  # fmt: skip
        """Acquire for ``member`` what it may have of the ``fetched`` batches (in offset order),
        at most ``max_records`` (exceeded to the end of a batch unless ``strict``, Kafka's
        record-limit acquire mode). Returns the acquired ranges with their delivery counts."""
        deadline = now_ms + self.limits.lock_ms
        out: list[Acquired] = []
        taken = 0
        for b in fetched:
            if taken >= max_records:
                break
            lo, hi = max(b.base_offset, self.spso), b.last_offset
            if hi < lo:
                continue
            if lo < self.speo:  # redeliveries inside the window
                for first, last, count in self._acquire_window(member, lo, min(hi, self.speo - 1),
                                                               deadline, b.skip,
                                                               max_records - taken if strict else None):  # fmt: skip
                    out.append(Acquired(first, last, count))
                    taken += last - first + 1
                if taken >= max_records and strict:
                    break
            if hi < self.speo:
                continue
            first = max(lo, self.speo)
            if first > self.speo:  # offsets between batches (compacted away): nothing to deliver
                self._append(Run(self.speo, first - 1, ARCHIVED, 0))
                self.stats.archived += first - self.speo
            if b.skip:
                self._append(Run(first, hi, ARCHIVED, 0))
                self.stats.archived += hi - first + 1
                continue
            if self.speo - self.spso >= self.limits.max_locks:
                break
            last = hi
            if strict:
                last = min(hi, first + (max_records - taken) - 1)
            self._append(Run(first, last, ACQUIRED, 1, member, deadline))
            out.append(Acquired(first, last, 1))
            taken += last - first + 1
            if last < hi:
                break
        self.stats.acquired += taken
        self.stats.redelivered += sum(a.last - a.first + 1 for a in out if a.deliveries > 1)
        if out:
            self._merge()
        self._advance()
        return _coalesce(out)

    def _acquire_window(self, member: str, lo: int, hi: int, deadline: int, skip: bool,
                        limit: int | None) -> list[tuple[int, int, int]]:  # fmt: skip
        got: list[tuple[int, int, int]] = []
        i = self._index(lo)
        while i < len(self.runs) and self.runs[i].first <= hi:
            r = self.runs[i]
            if r.state != AVAILABLE:
                i += 1
                continue
            first, last = max(r.first, lo), min(r.last, hi)
            if limit is not None:
                room = limit - sum(g[1] - g[0] + 1 for g in got)
                if room <= 0:
                    break
                last = min(last, first + room - 1)
            i = self._split(i, first, last)
            piece = self.runs[i]
            if skip:  # a control batch or aborted data: never delivered
                piece.state = ARCHIVED
                self.stats.archived += len(piece)
                self.changes += 1
            else:
                piece.state, piece.count = ACQUIRED, piece.count + 1
                piece.member, piece.deadline = member, deadline
                got.append((piece.first, piece.last, piece.count))
            i += 1
        return got

    # --- acknowledgement ---------------------------------------------------------------------
    def acknowledge(self, member: str, batches: Sequence[tuple[int, int, Sequence[int]]],
                    now_ms: int) -> ErrorCode:  # fmt: skip
        """Apply ``member``'s acknowledgements ``(first, last, types)`` — one type for the
        whole range, or one per offset. INVALID_RECORD_STATE (nothing applied) when an offset
        is not acquired by ``member``; INVALID_REQUEST for a malformed batch."""
        plan: list[tuple[int, int, int]] = []
        for first, last, types in batches:
            if last < first or not types or (len(types) != 1 and len(types) != last - first + 1):
                return ErrorCode.invalid_request
            if any(t not in (GAP, ACCEPT, RELEASE, REJECT, RENEW) for t in types):
                return ErrorCode.invalid_request
            if not self._held_by(member, first, last):
                return ErrorCode.invalid_record_state
            if len(types) == 1:
                plan.append((first, last, types[0]))
            else:
                plan.extend(_runs_of_types(first, types))
        for first, last, ack in plan:
            self._apply(first, last, ack, now_ms)
        self._merge()
        self._advance()
        return ErrorCode.none

    def _held_by(self, member: str, first: int, last: int) -> bool:
        if first < self.spso or last >= self.speo:
            return False
        i = self._index(first)
        while i < len(self.runs) and self.runs[i].first <= last:
            r = self.runs[i]
            if r.state != ACQUIRED or r.member != member:
                return False
            i += 1
        return True

    def _apply(self, first: int, last: int, ack: int, now_ms: int) -> None:
        i = self._index(first)
        while i < len(self.runs) and self.runs[i].first <= last:
            i = self._split(i, max(self.runs[i].first, first), min(self.runs[i].last, last))
            r = self.runs[i]
            n = len(r)
            if ack == RENEW:
                r.deadline = now_ms + self.limits.lock_ms
            elif ack == ACCEPT:
                r.state, r.member, r.deadline = ACKNOWLEDGED, None, 0
                self.stats.acknowledged += n
            elif ack in (REJECT, GAP):
                r.state, r.member, r.deadline = ARCHIVED, None, 0
                self.stats.archived += n
                if ack == REJECT:
                    self.stats.rejected += n
            else:  # RELEASE
                self.stats.released += n
                self._release(r)
            if ack != RENEW:
                self.changes += 1
            i += 1

    def _release(self, r: Run) -> None:
        """An acquired run given back (RELEASE, lock expiry, session closed)."""
        r.member, r.deadline = None, 0
        if r.count >= self.limits.delivery_limit:
            r.state = ARCHIVED
            self.stats.archived += len(r)
            self.stats.delivery_limit += len(r)
        else:
            r.state = AVAILABLE
        self.changes += 1

    # --- locks ---------------------------------------------------------------------------------
    def expire(self, now_ms: int) -> int:
        """Release the runs whose lock ran out; how many records that was."""
        n = 0
        for r in self.runs:
            if r.state == ACQUIRED and r.deadline <= now_ms:
                n += len(r)
                self._release(r)
        if n:
            self.stats.lock_expiries += n
            self._merge()
            self._advance()
        return n

    def release_member(self, member: str) -> int:
        """Release what ``member`` holds (its share session closed); how many records."""
        n = 0
        for r in self.runs:
            if r.state == ACQUIRED and r.member == member:
                n += len(r)
                self._release(r)
        if n:
            self._merge()
            self._advance()
        return n

    def move_start(self, offset: int) -> None:
        """The log no longer has offsets below ``offset`` (retention, DeleteRecords): they
        leave the window, whatever their state."""
        if offset <= self.spso:
            return
        self.runs = [r for r in self.runs if r.last >= offset]
        if self.runs and self.runs[0].first < offset:
            self.runs[0].first = offset
        self.spso = offset
        self.speo = max(self.speo, offset)
        self.changes += 1
        self._advance()

    # --- persistence -----------------------------------------------------------------------------
    def persisted(self) -> tuple[int, list[Batch], int]:
        """(start offset, state batches, delivery-complete count) to write: the window's
        non-trivial runs, acquired ones as available with their delivery count."""
        out: list[Batch] = []
        for r in self.runs:
            if r.state == AVAILABLE and r.count == 0:
                continue
            state = AVAILABLE if r.state == ACQUIRED else r.state
            if out and out[-1].last + 1 == r.first and (out[-1].state, out[-1].deliveries) == (state, r.count):
                out[-1] = Batch(out[-1].first, r.last, state, r.count)
            else:
                out.append(Batch(r.first, r.last, state, r.count))
        return self.spso, out, self.done_count()

    # --- run bookkeeping -------------------------------------------------------------------------
    def _index(self, offset: int) -> int:
        """The index of the run holding ``offset`` (which must be in the window)."""
        return max(bisect_right(self.runs, offset, key=_first) - 1, 0)

    def _split(self, i: int, first: int, last: int) -> int:
        """Split run ``i`` so that ``[first, last]`` (inside it) is a run of its own; its index."""
        r = self.runs[i]
        pieces = []
        if r.first < first:
            pieces.append(Run(r.first, first - 1, r.state, r.count, r.member, r.deadline))
        mid = Run(first, last, r.state, r.count, r.member, r.deadline)
        pieces.append(mid)
        if last < r.last:
            pieces.append(Run(last + 1, r.last, r.state, r.count, r.member, r.deadline))
        self.runs[i : i + 1] = pieces
        return i + (1 if r.first < first else 0)

    def _append(self, run: Run) -> None:
        self.runs.append(run)
        self.speo = run.last + 1

    def _merge(self) -> None:
        merged: list[Run] = []
        for r in self.runs:
            if merged:
                p = merged[-1]
                if (p.last + 1 == r.first and p.state == r.state and p.count == r.count
                        and p.member == r.member and p.deadline == r.deadline):  # fmt: skip
                    p.last = r.last
                    continue
            merged.append(r)
        self.runs = merged

    def _advance(self) -> None:
        """Move the start past the done runs at the front of the window."""
        k = 0
        while k < len(self.runs) and self.runs[k].state in DONE:
            k += 1
        if k:
            self.spso = self.runs[k - 1].last + 1
            del self.runs[:k]
            self.changes += 1
        if not self.runs:
            self.spso = max(self.spso, self.speo)
            self.speo = self.spso


def _first(run: Run) -> int:
    return run.first


def _runs_of_types(first: int, types: Sequence[int]) -> list[tuple[int, int, int]]:
    """Per-offset acknowledge types as ranges of one type each."""
    out: list[tuple[int, int, int]] = []
    for i, t in enumerate(types):
        offset = first + i
        if out and out[-1][2] == t and out[-1][1] + 1 == offset:
            out[-1] = (out[-1][0], offset, t)
        else:
            out.append((offset, offset, t))
    return out


def _coalesce(ranges: list[Acquired]) -> list[Acquired]:
    out: list[Acquired] = []
    for a in sorted(ranges):
        if out and out[-1].last + 1 == a.first and out[-1].deliveries == a.deliveries:
            out[-1] = Acquired(out[-1].first, a.last, a.deliveries)
        else:
            out.append(a)
    return out


__all__ = ["ACCEPT", "ACKNOWLEDGED", "ACQUIRED", "ARCHIVED", "AVAILABLE", "Acquired", "Batch",
           "FetchedBatch", "GAP", "Limits", "RELEASE", "REJECT", "RENEW", "Run", "SharePartition",
           "Stats"]
