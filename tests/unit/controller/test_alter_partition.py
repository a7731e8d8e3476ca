"""AlterPartition validation, and reassignment driven by the ISR it reports."""

from __future__ import annotations

import uuid

from strom.controller import reassignment, requests
from strom.protocol.errors import ErrorCode
from tests.unit.controller.harness import Cluster, run


def _proposal(topic: str | None, partition: int, leader_epoch: int, isr: tuple[int, ...],
              partition_epoch: int, *, topic_id: uuid.UUID | None = None,
              epochs: tuple[int, ...] | None = None) -> requests.IsrProposal:  # fmt: skip
    return requests.IsrProposal(topic_id, topic, partition, leader_epoch, isr,
                                epochs or (-1,) * len(isr), 0, partition_epoch)  # fmt: skip


def test_alter_partition_validation_and_success() -> None:
    async def scenario(cluster: Cluster) -> None:
        await cluster.start(1, 2, 3)
        await cluster.create_topic("t", {0: [1, 2, 3]})
        c = cluster.active()
        topic_id = c.ctx.topics["t"].topic_id  # type: ignore[union-attr]
        broker_epoch = c.ctx.brokers[1].epoch  # type: ignore[union-attr]

        async def alter(sender: int, epoch: int, p: requests.IsrProposal) -> tuple[ErrorCode, list[requests.IsrResult]]:
            return await c.call(lambda term: requests.alter_partition(term, sender, epoch, [p]))

        code, _ = await alter(1, broker_epoch + 1000, _proposal("t", 0, 0, (1, 2), 0))
        assert code == ErrorCode.stale_broker_epoch
        _, [r] = await alter(2, -1, _proposal("t", 0, 0, (2,), 0))
        assert r.error == ErrorCode.not_leader_or_follower
        _, [r] = await alter(1, broker_epoch, _proposal("t", 0, 7, (1, 2), 0))
        assert r.error == ErrorCode.fenced_leader_epoch
        _, [r] = await alter(1, broker_epoch, _proposal("t", 0, 0, (1, 2), 5))
        assert r.error == ErrorCode.invalid_update_version
        _, [r] = await alter(1, broker_epoch, _proposal("t", 0, 0, (1, 4), 0))
        assert r.error == ErrorCode.ineligible_replica
        _, [r] = await alter(1, broker_epoch, _proposal("t", 0, 0, (1, 2), 0, epochs=(-1, 99999)))
        assert r.error == ErrorCode.ineligible_replica  # 2 re-registered since the leader saw it
        _, [r] = await alter(1, broker_epoch, _proposal(None, 0, 0, (1,), 0, topic_id=uuid.uuid4()))
        assert r.error == ErrorCode.unknown_topic_id
        # by topic id (v2+), with the replicas' epochs (v3)
        epochs = tuple(c.ctx.brokers[b].epoch for b in (1, 2))  # type: ignore[union-attr]
        code, [r] = await alter(1, broker_epoch,
                                _proposal(None, 0, 0, (1, 2), 0, topic_id=topic_id, epochs=epochs))
        assert code == ErrorCode.none and r.error == ErrorCode.none
        assert (r.leader, r.leader_epoch, r.isr, r.partition_epoch) == (1, 0, (1, 2), 1)
        state, version = await cluster.state("t", 0)
        assert (state.isr, state.leader_epoch, version) == ((1, 2), 0, 1)
        await cluster.settle()
        for fake in cluster.brokers.values():  # every broker's cache learns the ISR
            assert tuple(fake.metadata()[("t", 0)].isr) == (1, 2)
            assert fake.metadata()[("t", 0)].zk_version == 1
        # a retry of the change already made is answered with the current state
        _, [r] = await alter(1, broker_epoch, _proposal("t", 0, 0, (1, 2), 0))
        assert r.error == ErrorCode.none and r.partition_epoch == 1
        # a stale partition epoch with a different ISR is refused
        _, [r] = await alter(1, broker_epoch, _proposal("t", 0, 0, (1, 2, 3), 0))
        assert r.error == ErrorCode.invalid_update_version
        _, [r] = await alter(1, broker_epoch, _proposal("t", 0, 0, (1, 2, 3), 1))
        assert r.error == ErrorCode.none and r.partition_epoch == 2

    run(scenario)


def test_reassignment_adds_waits_for_isr_moves_leader_removes_old() -> None:
    async def scenario(cluster: Cluster) -> None:
        await cluster.start(1, 2, 3, 4)
        await cluster.create_topic("t", {0: [1, 2]})
        c = cluster.active()
        results = await c.call(lambda term: reassignment.alter(term, {("t", 0): [3, 4], ("t", 9): [1]}))
        assert results[("t", 0)] == (ErrorCode.none, None)
        assert results[("t", 9)][0] == ErrorCode.unknown_topic_or_partition
        await cluster.settle()
        ongoing = reassignment.ongoing(c.ctx, None)  # type: ignore[arg-type]
        assert ongoing == {("t", 0): ([3, 4, 1, 2], [3, 4], [1, 2])}
        for b in (3, 4):  # the new replicas are told to start
            assert cluster.brokers[b].leader_and_isr()[("t", 0)].is_new
        state, version = await cluster.state("t", 0)
        assert state.leader == 1 and state.leader_epoch == 1
        # 3 catches up: not yet done; then 4: done
        _, [r] = await c.call(lambda term: requests.alter_partition(
            term, 1, -1, [_proposal("t", 0, 1, (1, 2, 3), version)]))  # fmt: skip
        assert r.error == ErrorCode.none
        assert reassignment.in_progress(c.ctx, ("t", 0))  # type: ignore[arg-type]
        _, [r] = await c.call(lambda term: requests.alter_partition(
            term, 1, -1, [_proposal("t", 0, 1, (1, 2, 3, 4), r.partition_epoch)]))  # fmt: skip
        assert r.error == ErrorCode.none
        await cluster.settle()
        assert not reassignment.in_progress(c.ctx, ("t", 0))  # type: ignore[arg-type]
        state, _ = await cluster.state("t", 0)
        assert state.leader == 3 and state.isr == (3, 4) and state.leader_epoch == 2
        doc, _ = await cluster.admin.get("/brokers/topics/t")
        assert b'"0": [3, 4]' in doc and b'"adding_replicas": {}' in doc  # Kafka writes empty maps
        assert ("t", 0, True) in cluster.brokers[1].stopped()
        assert ("t", 0, True) in cluster.brokers[2].stopped()
        assert list(cluster.brokers[4].metadata()[("t", 0)].replicas) == [3, 4]
        # cancelling when nothing moves
        results = await c.call(lambda term: reassignment.alter(term, {("t", 0): None}))
        assert results[("t", 0)][0] == ErrorCode.no_reassignment_in_progress
        bad = await c.call(lambda term: reassignment.alter(term, {("t", 0): [3, 3]}))
        assert bad[("t", 0)][0] == ErrorCode.invalid_replica_assignment

    run(scenario)


def test_reassignment_cancelled_and_resumed_after_failover() -> None:
    async def scenario(cluster: Cluster) -> None:
        await cluster.start(1, 2, 3)
        await cluster.create_topic("t", {0: [2, 3], 1: [2, 3]})
        c = cluster.active()
        assert c.broker_id == 1
        await c.call(lambda term: reassignment.alter(term, {("t", 0): [3, 1], ("t", 1): [3, 1]}))
        await c.call(lambda term: reassignment.alter(term, {("t", 1): None}))  # cancel
        await cluster.settle()
        state, _ = await cluster.state("t", 1)
        doc, _ = await cluster.admin.get("/brokers/topics/t")
        assert b'"1": [3, 2]' in doc  # Kafka: origin = replicas - adding, in RS order
        # the controller dies mid-move; the next one finishes it once 1 is in the ISR
        await cluster.kill(1)
        await cluster.start(1)
        await cluster.settle(lambda: any(x.active for x in cluster.controllers.values()))
        c = cluster.active()
        assert reassignment.ongoing(c.ctx, None) == {  # type: ignore[arg-type]
            ("t", 0): ([3, 1, 2], [1], [2])}
        state, version = await cluster.state("t", 0)
        _, [r] = await c.call(lambda term: requests.alter_partition(
            term, state.leader, -1, [_proposal("t", 0, state.leader_epoch, (2, 3, 1), version)]))  # fmt: skip
        assert r.error == ErrorCode.none
        await cluster.settle()
        state, _ = await cluster.state("t", 0)
        assert state.leader == 3 and set(state.isr) == {3, 1}
        assert reassignment.ongoing(c.ctx, None) == {}  # type: ignore[arg-type]

    run(scenario)
