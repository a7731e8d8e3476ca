"""What the controller does for brokers and admins: AlterPartition, ControlledShutdown,
ElectLeaders, and the periodic preferred-leader rebalance.

Each function runs as one controller event of a term (callers go through
:meth:`Controller.call`) and takes and returns plain values; the handler modules translate the
wire entities.

AlterPartition (a leader proposes a new ISR; Kafka's ``processAlterPartition``): the sender
must be a live broker at its current epoch (else STALE_BROKER_EPOCH for the whole request) and
each partition's leader (NOT_LEADER_OR_FOLLOWER); its leader epoch must be the current one
(FENCED_LEADER_EPOCH); a proposal equal to the current state is answered with it (a retry of a
change already made); otherwise its partition epoch must be the current one
(INVALID_UPDATE_VERSION); every ISR member must be a live replica not shutting down, at the
epoch the leader saw if it says (INELIGIBLE_REPLICA). An accepted ISR is written fenced with the
same leader epoch, answered with the new partition epoch, and sent to every broker with
UpdateMetadata; a reassignment waiting for that ISR moves on.

ControlledShutdown: the broker is marked shutting down; partitions it leads move to another
live ISR member (leader epoch +1), it leaves the ISR of the partitions it follows and gets
StopReplica (without deletion) for them; the answer lists the partitions it still leads.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass

from strom.controller import reassignment
from strom.controller.context import (
    TP,
    offline_election,
    preferred_election,
    shutdown_election,
)
from strom.controller.term import Term
from strom.metadata.zk_model import PartitionState
from strom.protocol.errors import ErrorCode

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class IsrProposal:
    topic_id: uuid.UUID | None
    topic: str | None
    partition: int
    leader_epoch: int
    new_isr: tuple[int, ...]
    broker_epochs: tuple[int, ...]  # per ISR member, -1 where not given (v2)
    leader_recovery_state: int
    partition_epoch: int


@dataclass(frozen=True, slots=True)
class IsrResult:
    error: ErrorCode
    leader: int = -1
    leader_epoch: int = -1
    isr: tuple[int, ...] = ()
    leader_recovery_state: int = 0
    partition_epoch: int = -1


def _answer(state: PartitionState, version: int, error: ErrorCode = ErrorCode.none) -> IsrResult:
    return IsrResult(error, state.leader, state.leader_epoch, tuple(state.isr),
                     state.leader_recovery_state, version)  # fmt: skip


async def alter_partition(term: Term, broker_id: int, broker_epoch: int,
                          proposals: list[IsrProposal]) -> tuple[ErrorCode, list[IsrResult]]:  # fmt: skip
    ctx = term.ctx
    live = ctx.brokers.get(broker_id)
    if live is None or (broker_epoch >= 0 and broker_epoch != live.epoch):
        return ErrorCode.stale_broker_epoch, []
    by_id = {doc.topic_id: name for name, doc in ctx.topics.items()}
    states = term.states()
    batch = term.batch()
    results: list[IsrResult] = []
    writes: list[tuple[int, TP, tuple[int, ...], PartitionState, int]] = []
    changed: list[TP] = []
    for p in proposals:
        name = by_id.get(p.topic_id) if p.topic_id is not None else p.topic
        if name is None or name not in ctx.topics:
            results.append(IsrResult(ErrorCode.unknown_topic_id if p.topic_id is not None
                                     else ErrorCode.unknown_topic_or_partition))  # fmt: skip
            continue
        tp = (name, p.partition)
        current = ctx.states.get(tp)
        if current is None or name in ctx.deleting:
            results.append(IsrResult(ErrorCode.unknown_topic_or_partition))
            continue
        s = current.state
        if s.leader != broker_id:
            results.append(IsrResult(ErrorCode.not_leader_or_follower))
            continue
        if p.leader_epoch != s.leader_epoch:
            results.append(IsrResult(ErrorCode.fenced_leader_epoch))
            continue
        if tuple(p.new_isr) == tuple(s.isr) and p.leader_recovery_state == s.leader_recovery_state:
            results.append(_answer(s, current.version))
            continue
        if p.partition_epoch != current.version:
            results.append(IsrResult(ErrorCode.invalid_update_version))
            continue
        if (p.leader_recovery_state == 1 and len(p.new_isr) > 1) or (
            s.leader_recovery_state == 0 and p.leader_recovery_state == 1
        ):
            results.append(IsrResult(ErrorCode.invalid_request))
            continue
        replicas = ctx.replicas(tp)
        epochs = dict(zip(p.new_isr, p.broker_epochs, strict=False))
        ineligible = [b for b in p.new_isr if b not in replicas or not ctx.eligible(b)
                      or epochs.get(b, -1) not in (-1, ctx.brokers[b].epoch)]  # fmt: skip
        if ineligible:
            log.info("AlterPartition %s-%d from %d: ineligible replicas %s", *tp, broker_id,
                     ineligible)  # fmt: skip
            results.append(IsrResult(ErrorCode.ineligible_replica))
            continue
        new = PartitionState(s.leader, s.leader_epoch, tuple(p.new_isr), ctx.epoch,
                             p.leader_recovery_state)  # fmt: skip
        writes.append((len(results), tp, s.isr, new, current.version))
        results.append(IsrResult(ErrorCode.unknown_server_error))  # replaced below
    # the accepted changes are written concurrently (a leader of many partitions shrinking)
    written_all = await asyncio.gather(*(states.write(tp, new, version)
                                         for _i, tp, _old, new, version in writes))  # fmt: skip
    for (i, tp, old_isr, new, _v), written in zip(writes, written_all, strict=True):
        if written is None:
            results[i] = IsrResult(ErrorCode.invalid_update_version)
            continue
        log.info("partition %s-%d: ISR %s -> %s (leader %d)", *tp, list(old_isr), list(new.isr),
                 new.leader)  # fmt: skip
        batch.add_update_metadata(ctx.live_ids(), [tp])
        changed.append(tp)
        results[i] = _answer(written.state, written.version)
    term.send(batch)
    if changed:
        await reassignment.check(term, changed)
    return ErrorCode.none, results


async def controlled_shutdown(term: Term, broker_id: int,
                              broker_epoch: int) -> tuple[ErrorCode, list[TP]]:  # fmt: skip
    ctx = term.ctx
    live = ctx.brokers.get(broker_id)
    if live is None:
        return ErrorCode.broker_not_available, []
    if broker_epoch >= 0 and broker_epoch != live.epoch:
        return ErrorCode.stale_broker_epoch, []
    ctx.shutting_down.add(broker_id)
    log.info("controller: controlled shutdown of broker %d", broker_id)
    states = term.states()
    batch = term.batch()
    replicated = [tp for tp in ctx.hosted_by(broker_id) if len(ctx.replicas(tp)) > 1
                  and tp[0] not in ctx.deleting and tp in ctx.states]  # fmt: skip
    led = [tp for tp in replicated if ctx.states[tp].state.leader == broker_id]
    elector = states.elect(lambda tp, s: shutdown_election(ctx, ctx.replicas(tp), s.isr))
    await states.update(led, elector, batch)
    followed = [tp for tp in replicated if ctx.states[tp].state.leader != broker_id]
    await states.update(followed, states.remove_from_isr(broker_id), batch)
    for tp in followed:
        batch.add_stop_replica([broker_id], tp, delete=False)
    term.send(batch)
    remaining = [tp for tp in replicated if ctx.states[tp].state.leader == broker_id]
    return ErrorCode.none, sorted(remaining)


ELECTION_PREFERRED = 0
ELECTION_UNCLEAN = 1


async def elect_leaders(term: Term, election_type: int,
                        wanted: list[TP] | None) -> dict[TP, tuple[ErrorCode, str | None]]:  # fmt: skip
    """ElectLeaders: ``wanted`` None means every partition (preferred: those not led by their
    preferred replica)."""
    ctx = term.ctx
    if wanted is None:
        wanted = [tp for tp in ctx.partitions() if tp in ctx.states and
                  (election_type != ELECTION_PREFERRED
                   or ctx.states[tp].state.leader != ctx.replicas(tp)[0])]  # fmt: skip
    results: dict[TP, tuple[ErrorCode, str | None]] = {}
    todo: list[TP] = []
    for tp in wanted:
        found = ctx.states.get(tp)
        if found is None or tp[0] in ctx.deleting:
            results[tp] = (ErrorCode.unknown_topic_or_partition,
                           f"The partition {tp[0]}-{tp[1]} does not exist.")  # fmt: skip
            continue
        s, replicas = found.state, ctx.replicas(tp)
        if election_type == ELECTION_PREFERRED:
            if s.leader == replicas[0]:
                results[tp] = (ErrorCode.election_not_needed, "Leader is already the preferred replica.")
            elif preferred_election(ctx, replicas, s.isr, tp) is None:
                results[tp] = (ErrorCode.preferred_leader_not_available,
                               f"Failed to elect leader for partition {tp[0]}-{tp[1]} under "
                               "strategy PreferredReplicaPartitionLeaderElectionStrategy")  # fmt: skip
            else:
                todo.append(tp)
        elif ctx.live(s.leader):
            results[tp] = (ErrorCode.election_not_needed, "The partition has a live leader.")
        elif offline_election(ctx, replicas, s.isr, True) is None:
            results[tp] = (ErrorCode.eligible_leaders_not_available,
                           f"No live replica of {tp[0]}-{tp[1]} can become its leader.")  # fmt: skip
        else:
            todo.append(tp)
    states = term.states()
    batch = term.batch()
    if election_type == ELECTION_PREFERRED:
        elector = states.elect(lambda tp, s: preferred_election(ctx, ctx.replicas(tp), s.isr, tp))
    else:
        elector = states.elect(lambda tp, s: offline_election(ctx, ctx.replicas(tp), s.isr, True, tp))
    changed = await states.update(todo, elector, batch)
    term.send(batch)
    for tp in todo:
        results[tp] = ((ErrorCode.none, None) if tp in changed else
                       (ErrorCode.eligible_leaders_not_available, "The partition state changed "
                        "during the election; try again."))  # fmt: skip
    return results


async def rebalance(term: Term) -> set[TP]:
    """The preferred-leader check (``auto.leader.rebalance.enable``): for each live broker
    whose share of preferred partitions led by others exceeds
    ``leader.imbalance.per.broker.percentage``, move those back to it where it is in the ISR."""
    ctx = term.ctx
    todo: list[TP] = []
    reassigning = {(t, p) for t, doc in ctx.topics.items() for p in doc.adding}
    for broker in sorted(ctx.brokers):
        if not ctx.eligible(broker):
            continue
        preferred = [tp for tp in ctx.partitions() if tp in ctx.states and
                     ctx.replicas(tp)[0] == broker and tp[0] not in ctx.deleting]  # fmt: skip
        if not preferred:
            continue
        imbalanced = [tp for tp in preferred if ctx.states[tp].state.leader != broker]
        ratio = len(imbalanced) * 100 / len(preferred)
        if ratio > term.settings.imbalance_percentage:
            todo += [tp for tp in imbalanced if tp not in reassigning
                     and broker in ctx.states[tp].state.isr]  # fmt: skip
    if not todo:
        return set()
    log.info("controller: preferred-leader rebalance of %d partitions", len(todo))
    results = await elect_leaders(term, ELECTION_PREFERRED, todo)
    return {tp for tp, (code, _m) in results.items() if code == ErrorCode.none}
