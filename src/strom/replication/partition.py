"""One hosted partition's replication state: leader or follower, epochs, ISR, high watermark.

Kafka's ``cluster/Partition.scala`` in small: the controller's LeaderAndIsr makes the local
replica the leader (:meth:`Partition.make_leader`) or a follower (:meth:`make_follower`); on
the leader, followers' Fetch requests report their log end offsets
(:meth:`update_follower`), which move the high watermark (:meth:`maybe_advance_hw`) and decide
ISR changes (:meth:`out_of_sync_replicas`, :meth:`can_join_isr`). No I/O here: the replica
manager sends AlterPartition and completes waiting produce requests; time comes from the
injected clock (``time_ms``), so every decision is unit-tested with the fake clock.

Invariants:
- the leader's high watermark never goes back; it is min(log end offset) over the *maximal*
  ISR (the committed ISR plus any replica an AlterPartition in flight adds, KIP-497);
- ``min.insync.replicas`` is checked against the *minimal* ISR (the committed ISR minus any
  replica an AlterPartition in flight removes);
- a follower is in sync when it fetched up to the leader's log end offset within
  ``replica.lag.time.max.ms`` (its ``last_caught_up_ms``, Kafka's rule: a fetch at offset X
  counts as caught up at the time of the previous fetch if X reached the leader's end offset
  as it was then);
- a follower joins the ISR once its end offset reaches the high watermark and the start
  offset of the leader's current epoch (so the HW cannot move back by its joining);
- every batch the leader appends is stamped with its leader epoch, and the epoch's start
  offset is in the leader-epoch cache from the moment it becomes leader.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from strom.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from strom.clock import Clock
    from strom.storage.log import Log

NO_EPOCH = -1


@dataclass(slots=True)
class FollowerState:
    """What the leader knows of one follower replica."""

    log_end_offset: int = -1
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    last_fetch_leader_leo: int = -1


@dataclass(frozen=True, slots=True)
class PendingIsr:
    """An ISR change sent to the controller and not answered yet."""

    proposed: tuple[int, ...]
    committed: tuple[int, ...]

    @property
    def maximal(self) -> tuple[int, ...]:
        return tuple(sorted(set(self.proposed) | set(self.committed)))

    @property
    def minimal(self) -> tuple[int, ...]:
        return tuple(sorted(set(self.proposed) & set(self.committed)))


class Partition:
    def __init__(self, topic: str, index: int, log: Log, local_id: int, clock: Clock) -> None:
        self.topic = topic
        self.index = index
        self.key = (topic, index)  # the purgatories' key
        self.log = log
        self.local_id = local_id
        self.clock = clock
        self.leader_id = -1
        self.leader_epoch = NO_EPOCH
        self.leader_epoch_start = 0  # first offset of the current leader epoch (on the leader)
        self.partition_epoch = -1
        self.controller_epoch = -1
        self.replicas: tuple[int, ...] = ()
        self.isr: tuple[int, ...] = ()
        self.pending: PendingIsr | None = None
        self.followers: dict[int, FollowerState] = {}
        #: called after every change of role or ISR (the replica manager keeps the leaders
        #: with followers in their ISR from it: the only partitions the shrink check visits)
        self.on_isr_change: Callable[[Partition], None] | None = None

    def __repr__(self) -> str:
        role = "leader" if self.is_leader else f"follower of {self.leader_id}"
        return (f"Partition({self.topic}-{self.index}, {role}, epoch {self.leader_epoch}, "
                f"isr {list(self.isr)})")  # fmt: skip

    # --- roles -------------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_id

    @property
    def has_isr_followers(self) -> bool:
        """Leads with another replica in its ISR: the only state in which an ISR can shrink."""
        return self.is_leader and any(r != self.local_id for r in self.isr)

    def _isr_changed(self) -> None:
        if self.on_isr_change is not None:
            self.on_isr_change(self)

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        return self.pending.maximal if self.pending else self.isr

    @property
    def minimal_isr(self) -> tuple[int, ...]:
        return self.pending.minimal if self.pending else self.isr

    def _apply_common(self, leader: int, leader_epoch: int, partition_epoch: int,
                      replicas: tuple[int, ...], isr: tuple[int, ...],
                      controller_epoch: int) -> None:  # fmt: skip
        self.leader_id = leader
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.replicas = replicas
        self.isr = isr
        self.controller_epoch = controller_epoch
        self.pending = None
        self._isr_changed()

    def make_leader(self, leader_epoch: int, partition_epoch: int, replicas: tuple[int, ...],
                    isr: tuple[int, ...], controller_epoch: int = -1) -> bool:  # fmt: skip
        """Become (or stay) the leader; True if this is a new leader epoch here.

        A new epoch starts at the log end offset (recorded in the leader-epoch cache now, as
        Kafka does at the election, so OffsetForLeaderEpoch answers it before any append);
        followers' states start unknown but, for those in the ISR, "caught up now" so they
        are not dropped before their first fetch."""
        new_epoch = not self.is_leader or leader_epoch != self.leader_epoch
        self._apply_common(self.local_id, leader_epoch, partition_epoch, replicas, isr,
                           controller_epoch)  # fmt: skip
        now = self.clock.time_ms()
        if new_epoch:
            # a follower's fetched batches being written (a slow disk) are part of the log
            # before the epoch starts after them (waits for the write: rare)
            self.log.settle()
            end = self.log.log_end_offset
            self.leader_epoch_start = end
            self.log.leader_epochs.assign(leader_epoch, end)
            self.followers = {
                r: FollowerState(last_caught_up_ms=now if r in isr else 0)
                for r in replicas if r != self.local_id
            }  # fmt: skip
        else:
            for r in replicas:
                if r != self.local_id and r not in self.followers:
                    self.followers[r] = FollowerState()
            for r in list(self.followers):
                if r not in replicas:
                    del self.followers[r]
        self.maybe_advance_hw()
        return new_epoch

    def make_follower(self, leader: int, leader_epoch: int, partition_epoch: int,
                      replicas: tuple[int, ...], isr: tuple[int, ...],
                      controller_epoch: int = -1) -> bool:  # fmt: skip
        """Follow ``leader``; True if the leader or its epoch changed (fetching restarts)."""
        changed = leader != self.leader_id or leader_epoch != self.leader_epoch
        self._apply_common(leader, leader_epoch, partition_epoch, replicas, isr,
                           controller_epoch)  # fmt: skip
        self.followers = {}
        return changed

    def check_leader_epoch(self, requested: int) -> ErrorCode:
        """Kafka's ``checkCurrentLeaderEpoch``: -1 skips the check; an older epoch is fenced,
        a newer one unknown (this broker has not heard of it yet)."""
        if requested == NO_EPOCH or requested == self.leader_epoch:
            return ErrorCode.none
        if requested < self.leader_epoch:
            return ErrorCode.fenced_leader_epoch
        return ErrorCode.unknown_leader_epoch

    # --- leader: followers and the high watermark ----------------------------------------------

    def update_follower(self, replica: int, fetch_offset: int) -> bool:
        """A follower fetched at ``fetch_offset`` (its log end offset); True if the high
        watermark moved. Unknown replicas (not assigned here) are ignored."""
        state = self.followers.get(replica)
        if state is None:
            return False
        now = self.clock.time_ms()
        leader_end = self.log.log_end_offset
        if fetch_offset >= leader_end:
            state.last_caught_up_ms = now
        elif fetch_offset >= state.last_fetch_leader_leo >= 0:
            state.last_caught_up_ms = max(state.last_caught_up_ms, state.last_fetch_ms)
        state.log_end_offset = fetch_offset
        state.last_fetch_ms = now
        state.last_fetch_leader_leo = leader_end
        return self.maybe_advance_hw()

    def replica_leo(self, replica: int) -> int:
        if replica == self.local_id:
            return self.log.log_end_offset
        state = self.followers.get(replica)
        return state.log_end_offset if state is not None else -1

    def maybe_advance_hw(self) -> bool:
        """Move the HW to the smallest log end offset of the maximal ISR (never back)."""
        local = self.local_id
        if self.leader_id != local:
            return False
        isr = self.pending.maximal if self.pending else self.isr
        if len(isr) == 1 and isr[0] == local:  # alone (every single node): its LEO
            return self.log.advance_high_watermark_to_end()
        candidate = min((self.replica_leo(r) for r in isr), default=-1)
        if self.local_id not in isr:
            candidate = min(candidate, self.log.log_end_offset) if candidate >= 0 else (
                self.log.log_end_offset)  # fmt: skip
        if candidate > self.log.high_watermark:
            self.log.high_watermark = candidate
            return True
        return False

    def out_of_sync_replicas(self, lag_ms: int) -> list[int]:
        """ISR followers that have not caught up within ``lag_ms``."""
        now = self.clock.time_ms()
        return [r for r in self.isr if r != self.local_id
                and now - self.followers.get(r, FollowerState()).last_caught_up_ms > lag_ms]  # fmt: skip

    def can_join_isr(self, replica: int) -> bool:
        """A follower outside the ISR that has reached the HW and the current epoch's start."""
        if replica in self.maximal_isr or replica not in self.followers:
            return False
        leo = self.followers[replica].log_end_offset
        return leo >= self.log.high_watermark and leo >= self.leader_epoch_start

    def propose_isr(self, proposed: tuple[int, ...]) -> PendingIsr:
        self.pending = PendingIsr(tuple(sorted(proposed)), self.isr)
        return self.pending

    def apply_isr(self, isr: tuple[int, ...], leader_epoch: int, partition_epoch: int) -> None:
        """The controller accepted an ISR change (AlterPartition's answer)."""
        self.isr = tuple(isr)
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.pending = None
        self._isr_changed()
        self.maybe_advance_hw()

    # --- follower ------------------------------------------------------------------------------

    def follower_high_watermark(self, leader_hw: int) -> None:
        """A follower's HW: the leader's, capped by its own log end offset."""
        self.log.high_watermark = min(leader_hw, self.log.log_end_offset)
