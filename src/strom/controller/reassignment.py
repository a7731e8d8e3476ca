"""Partition reassignment (KIP-455, Kafka's ``onPartitionReassignment``).

With ORS the original replicas and TRS the target ones, a reassignment is:

1. the topic document records ``partitions`` = TRS + (ORS - TRS) (RS, every replica during the
   move), ``adding_replicas`` = TRS - ORS and ``removing_replicas`` = ORS - TRS; the leader
   epoch is bumped and every replica of RS gets LeaderAndIsr (the new ones start fetching);
2. the controller waits until every target replica is in the ISR (checked after each accepted
   AlterPartition and each broker joining);
3. then the assignment becomes TRS; the leader moves to a target replica in the ISR if it is
   not one (or is not live), the ISR loses the removed replicas, the leader epoch is bumped;
   the removed replicas get StopReplica(delete); every broker gets UpdateMetadata.

The document is written fenced by the controller epoch, so a reassignment in flight survives a
controller failover: the new controller reads ``adding``/``removing`` and resumes (:func:`resume`).
Cancelling (a null replica list) reassigns back to ORS. A new target for a partition already
moving replaces the old target, keeping the original ORS.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from strom.controller.context import TP, ControllerContext, reassignment_election
from strom.controller.term import Term
from strom.metadata.zk_model import PartitionState
from strom.protocol.errors import ErrorCode

log = logging.getLogger(__name__)
Outcome = tuple[ErrorCode, str | None]


def original(ctx: ControllerContext, tp: TP) -> list[int]:
    doc = ctx.topics[tp[0]]
    adding = set(doc.adding.get(tp[1], ()))
    return [b for b in doc.assignment.get(tp[1], ()) if b not in adding]


def target(ctx: ControllerContext, tp: TP) -> list[int]:
    doc = ctx.topics[tp[0]]
    removing = set(doc.removing.get(tp[1], ()))
    return [b for b in doc.assignment.get(tp[1], ()) if b not in removing]


def in_progress(ctx: ControllerContext, tp: TP) -> bool:
    doc = ctx.topics.get(tp[0])
    return doc is not None and (tp[1] in doc.adding or tp[1] in doc.removing)


async def alter(term: Term, wanted: dict[TP, list[int] | None]) -> dict[TP, Outcome]:
    """AlterPartitionReassignments: start, replace or (None) cancel each partition's move."""
    ctx = term.ctx
    results: dict[TP, Outcome] = {}
    started: list[TP] = []
    for tp, replicas in wanted.items():
        doc = ctx.topics.get(tp[0])
        if doc is None or tp[1] not in doc.assignment or tp[0] in ctx.deleting:
            results[tp] = (ErrorCode.unknown_topic_or_partition,
                           f"Topic or partition {tp[0]}-{tp[1]} does not exist.")  # fmt: skip
            continue
        ors = original(ctx, tp)
        if replicas is None:
            if not in_progress(ctx, tp):
                results[tp] = (ErrorCode.no_reassignment_in_progress,
                               f"No reassignment of {tp[0]}-{tp[1]} is in progress.")  # fmt: skip
                continue
            replicas = ors
        error = _invalid(ctx, replicas)
        if error is not None:
            results[tp] = (ErrorCode.invalid_replica_assignment, error)
            continue
        trs = list(replicas)
        doc.assignment[tp[1]] = trs + [b for b in ors if b not in trs]
        adding = [b for b in trs if b not in ors]
        removing = [b for b in ors if b not in trs]
        _set(doc.adding, tp[1], adding)
        _set(doc.removing, tp[1], removing)
        started.append(tp)
        results[tp] = (ErrorCode.none, None)
        log.info("controller: reassigning %s-%d from %s to %s", *tp, ors, trs)
    for topic in sorted({tp[0] for tp in started}):
        await term.write_topic(topic)
    states = term.states()
    batch = term.batch()
    bump = states.elect(lambda tp, s: (s.leader, tuple(s.isr)) if ctx.live(s.leader) else None)
    await states.update([tp for tp in started if tp in ctx.states], bump, batch)
    for tp in started:  # new replicas hear even if the leader is down
        batch.add_leader_and_isr(ctx.topics[tp[0]].adding.get(tp[1], ()), tp, is_new=True)
    term.send(batch)
    await check(term, started)
    return results


def _set(table: dict[int, list[int]], partition: int, brokers: list[int]) -> None:
    if brokers:
        table[partition] = brokers
    else:
        table.pop(partition, None)


def _invalid(ctx: ControllerContext, replicas: Sequence[int]) -> str | None:
    if not replicas:
        return "The replica list is empty."
    if len(set(replicas)) != len(replicas):
        return f"Duplicate brokers in the replica list {list(replicas)}."
    missing = sorted(b for b in replicas if not ctx.live(b))
    if missing:
        return f"Brokers {missing} in the replica list are not live."
    return None


async def check(term: Term, tps: Iterable[TP]) -> None:
    """Complete the moves among ``tps`` whose target replicas are all in the ISR."""
    ctx = term.ctx
    ready = [tp for tp in tps if in_progress(ctx, tp) and tp in ctx.states
             and set(target(ctx, tp)) <= set(ctx.states[tp].state.isr)]  # fmt: skip
    if not ready:
        return
    states = term.states()
    batch = term.batch()
    removed: dict[TP, list[int]] = {}
    for tp in ready:
        doc = ctx.topics[tp[0]]
        trs = target(ctx, tp)
        removed[tp] = list(doc.removing.get(tp[1], ()))
        doc.assignment[tp[1]] = trs
        doc.adding.pop(tp[1], None)
        doc.removing.pop(tp[1], None)

    def move(tp: TP, s: PartitionState) -> PartitionState | None:
        trs = ctx.replicas(tp)
        isr = tuple(b for b in s.isr if b in trs)
        if s.leader in trs and ctx.live(s.leader):
            return PartitionState(s.leader, s.leader_epoch + 1, isr, ctx.epoch,
                                  s.leader_recovery_state)  # fmt: skip
        picked = reassignment_election(ctx, trs, isr)
        if picked is None:
            return None
        return PartitionState(picked[0], s.leader_epoch + 1, picked[1], ctx.epoch, 0)

    for topic in sorted({tp[0] for tp in ready}):
        await term.write_topic(topic)
    await states.update(ready, move, batch)
    for tp in ready:
        batch.add_stop_replica(removed[tp], tp, delete=True)
        batch.add_leader_and_isr(ctx.replicas(tp), tp)
        log.info("controller: reassignment of %s-%d done: replicas %s", *tp, ctx.replicas(tp))
    term.send(batch)


async def check_all(term: Term) -> None:
    ctx = term.ctx
    await check(term, [tp for tp in ctx.partitions() if in_progress(ctx, tp)])


async def resume(term: Term) -> None:
    """After a failover: tell the new replicas again, and finish what is ready."""
    ctx = term.ctx
    moving = [tp for tp in ctx.partitions() if in_progress(ctx, tp)]
    if not moving:
        return
    batch = term.batch()
    for tp in moving:
        if tp in ctx.states:
            batch.add_leader_and_isr(ctx.replicas(tp), tp)
    term.send(batch)
    await check(term, moving)


def ongoing(ctx: ControllerContext, wanted: list[TP] | None) -> dict[TP, tuple[list[int], list[int],
                                                                               list[int]]]:  # fmt: skip
    """ListPartitionReassignments: tp -> (replicas, adding, removing) of the moves in flight."""
    tps = ctx.partitions() if wanted is None else wanted
    found = {}
    for tp in tps:
        if in_progress(ctx, tp):
            doc = ctx.topics[tp[0]]
            found[tp] = (list(doc.assignment[tp[1]]), list(doc.adding.get(tp[1], ())),
                         list(doc.removing.get(tp[1], ())))  # fmt: skip
    return found
