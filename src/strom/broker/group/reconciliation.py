"""Incremental reconciliation: one member's next step towards its target assignment.

Kafka's ``CurrentAssignmentBuilder`` (KIP-848), a pure function of the member, its target (at
the target's epoch), who owns which partition now and what the member reported owning. The
rule that makes rebalances cooperative: a partition moves in two steps. Its old owner is first
asked to revoke it (the member stays at its epoch, UNREVOKED_PARTITIONS) and keeps everything
else; only once that member reports (in a heartbeat's owned partitions) it no longer has it
does the member move to the new epoch, and only then may the partition be given to its new
owner, who until then waits for it (UNRELEASED_PARTITIONS) while reading the rest of its
assignment. No partition is ever owned by two members, and no member stops reading the
partitions it keeps.

- Stable at an older epoch than the target: compute the next step (below).
- UNREVOKED_PARTITIONS: wait while the member still reports a partition pending revocation
  (or reports nothing: a heartbeat without its owned partitions says nothing about them);
  then it moves to epoch + 1 and the next step is computed.
- UNRELEASED_PARTITIONS: the next step is computed again (partitions may have been freed).
- UNKNOWN (a state from a newer coordinator): the member must rejoin with nothing owned
  (:class:`FencedMember`), else it starts afresh at the target.

The next step: assigned = currently assigned ∩ target; pending revocation = the rest of what
it has; newly assignable = target − assigned, less partitions some other member still owns.
With something to revoke (and still reported owned), the member is asked to revoke at its
epoch; otherwise it moves to the target epoch with the newly assignable partitions added,
Stable, or UNRELEASED_PARTITIONS while part of its target is still owned elsewhere.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import replace

from strom.broker.group.consumer_model import ConsumerMember, MemberState
from strom.broker.group.consumer_records import TopicPartitions

#: (topic id, partition) -> the epoch of the member owning it now, -1 if none does
OwnerEpoch = Callable[[uuid.UUID, int], int]


class FencedMember(Exception):
    """The member must give up all its partitions and rejoin (FENCED_MEMBER_EPOCH)."""


def _owns_any(reported: TopicPartitions | None, parts: TopicPartitions) -> bool:
    if reported is None:
        return True
    return any(p in parts.get(tid, ()) for tid, ps in reported.items() for p in ps)


def reconcile(member: ConsumerMember, target_epoch: int, target: TopicPartitions,
              owner_epoch: OwnerEpoch, reported: TopicPartitions | None) -> ConsumerMember:  # fmt: skip
    """The member after its next step (the same object when nothing changes)."""
    state = member.state
    if state is MemberState.STABLE:
        if member.member_epoch == target_epoch:
            return member
        return _next(member, member.member_epoch, target_epoch, target, owner_epoch, reported)
    if state is MemberState.UNREVOKED_PARTITIONS:
        if _owns_any(reported, member.pending_revocation):
            return member
        return _next(member, member.member_epoch + 1, target_epoch, target, owner_epoch, reported)
    if state is MemberState.UNRELEASED_PARTITIONS:
        return _next(member, member.member_epoch, target_epoch, target, owner_epoch, reported)
    if reported is None or any(reported.values()):
        raise FencedMember("The consumer group member is in a unknown state. "
                           "The member must abandon all its partitions and rejoin.")  # fmt: skip
    return _next(member, target_epoch, target_epoch, target, owner_epoch, reported)


def _with_epoch(member: ConsumerMember, epoch: int, **changes: object) -> ConsumerMember:
    """Kafka's updateMemberEpoch: the previous epoch is the one left."""
    return replace(member, member_epoch=epoch, previous_member_epoch=member.member_epoch,
                   **changes)  # type: ignore[arg-type]  # fmt: skip


def _next(member: ConsumerMember, epoch: int, target_epoch: int, target: TopicPartitions,
          owner_epoch: OwnerEpoch, reported: TopicPartitions | None) -> ConsumerMember:  # fmt: skip
    assigned: TopicPartitions = {}
    revoke: TopicPartitions = {}
    pending: TopicPartitions = {}
    unreleased = False
    for tid in set(target) | set(member.assigned):
        want = target.get(tid, frozenset())
        have = member.assigned.get(tid, frozenset())
        keep = have & want
        if keep:
            assigned[tid] = keep
        if have - keep:
            revoke[tid] = have - keep
        free = frozenset(p for p in want - keep if owner_epoch(tid, p) == -1)
        if len(free) < len(want - keep):
            unreleased = True
        if free:
            pending[tid] = free
    if revoke and _owns_any(reported, revoke):
        return _with_epoch(member, epoch, state=MemberState.UNREVOKED_PARTITIONS,
                           assigned=assigned, pending_revocation=revoke)  # fmt: skip
    for tid, ps in pending.items():
        assigned[tid] = assigned.get(tid, frozenset()) | ps
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return _with_epoch(member, target_epoch, state=state, assigned=assigned,
                       pending_revocation={})  # fmt: skip
