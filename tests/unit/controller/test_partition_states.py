"""Partition states: creation, leader election from the ISR only, unclean when enabled,
controlled shutdown, preferred election and rebalance, deletion."""

from __future__ import annotations

from strom.controller import requests
from strom.controller.context import ControllerContext
from strom.controller.controller import ControllerSettings
from strom.metadata.zk_model import NO_LEADER, PartitionState
from strom.protocol.errors import ErrorCode
from strom.protocol.interbroker import LEADER_AND_ISR
from tests.unit.controller.harness import Cluster, run


async def _shrink_isr(cluster: Cluster, tp: tuple[str, int], isr: tuple[int, ...]) -> None:
    """The leader drops followers from the ISR through AlterPartition."""
    c = cluster.active()
    state, version = await cluster.state(*tp)
    proposal = requests.IsrProposal(None, tp[0], tp[1], state.leader_epoch, isr,
                                    (-1,) * len(isr), 0, version)  # fmt: skip
    code, results = await c.call(lambda term: requests.alter_partition(term, state.leader, -1, [proposal]))
    assert code == ErrorCode.none and results[0].error == ErrorCode.none, results


def test_new_topic_states_leader_first_live_replica_isr_live_replicas() -> None:
    async def scenario(cluster: Cluster) -> None:
        await cluster.start(1, 2, 3)
        await cluster.create_topic("t", {0: [2, 3, 1], 1: [3, 1, 2], 2: [1, 2, 3]})
        for p, leader in ((0, 2), (1, 3), (2, 1)):
            state, version = await cluster.state("t", p)
            assert (state.leader, state.leader_epoch, version) == (leader, 0, 0)
            assert set(state.isr) == {1, 2, 3} and state.controller_epoch == 1
        # every replica was told, with is_new, and every broker's metadata has the partitions
        for b, fake in cluster.brokers.items():
            heard = fake.leader_and_isr()
            assert set(heard) == {("t", 0), ("t", 1), ("t", 2)}
            assert all(p.is_new for p in heard.values())
            assert heard[("t", 0)].leader == 2 and list(heard[("t", 0)].replicas) == [2, 3, 1]
            assert set(fake.metadata()) == set(heard), b

    run(scenario)


def test_broker_loss_elects_from_the_isr_only_with_a_higher_leader_epoch() -> None:
    async def scenario(cluster: Cluster) -> None:
        await cluster.start(1, 2, 3)
        await cluster.create_topic("t", {0: [1, 2, 3]})
        await _shrink_isr(cluster, ("t", 0), (1, 3))  # 2 fell behind
        await cluster.kill(1)
        state, _ = await cluster.state("t", 0)
        # 2 is earlier in the assignment but out of the ISR: 3 leads
        assert (state.leader, state.isr, state.leader_epoch) == (3, (3,), 1)
        assert cluster.brokers[3].leader_and_isr()[("t", 0)].leader_epoch == 1
        assert cluster.brokers[2].leader_and_isr()[("t", 0)].leader == 3
        assert list(cluster.brokers[2].metadata()[("t", 0)].offline_replicas) == [1]

    run(scenario)


def test_no_isr_member_left_goes_offline_unless_unclean_enabled() -> None:
    async def scenario(cluster: Cluster) -> None:
        await cluster.start(1, 2, 3)
        await cluster.create_topic("clean", {0: [1, 2, 3]})
        await cluster.create_topic("dirty", {0: [1, 2, 3]})
        await cluster.set_topic_config("dirty", {"unclean.leader.election.enable": "true"})
        await _shrink_isr(cluster, ("clean", 0), (1,))
        await _shrink_isr(cluster, ("dirty", 0), (1,))
        await cluster.kill(1)
        await cluster.settle(lambda: any(c.active for c in cluster.controllers.values()))
        clean, _ = await cluster.state("clean", 0)
        assert (clean.leader, clean.isr) == (NO_LEADER, (1,))  # offline, the last ISR kept
        dirty, _ = await cluster.state("dirty", 0)
        assert dirty.leader == 2 and dirty.isr == (2,) and dirty.leader_recovery_state == 1
        # ElectLeaders unclean on the clean topic is the admin's explicit choice
        c = cluster.active()
        results = await c.call(lambda term: requests.elect_leaders(term, 1, [("clean", 0), ("nope", 0)]))
        assert results[("clean", 0)][0] == ErrorCode.none
        assert results[("nope", 0)][0] == ErrorCode.unknown_topic_or_partition
        clean, _ = await cluster.state("clean", 0)
        assert clean.leader == 2 and clean.isr == (2,)
        # a returning ISR member of an offline partition makes it electable again
        await cluster.kill(2)
        await cluster.kill(3)
        await cluster.start(1)
        clean, _ = await cluster.state("clean", 0)
        assert clean.leader == NO_LEADER  # 1 is out of the ISR
        dirty, _ = await cluster.state("dirty", 0)
        assert dirty.leader == 1 and dirty.isr == (1,)  # unclean: any live replica
        await cluster.start(2)
        clean, _ = await cluster.state("clean", 0)
        assert clean.leader == 2 and clean.isr == (2,)

    run(scenario)


def test_controlled_shutdown_moves_leadership_and_shrinks_isr() -> None:
    async def scenario(cluster: Cluster) -> None:
        await cluster.start(1, 2, 3)
        await cluster.create_topic("t", {0: [1, 2, 3], 1: [2, 1, 3], 2: [1]})
        c = cluster.active()
        code, remaining = await c.call(lambda term: requests.controlled_shutdown(term, 1, -1))
        assert code == ErrorCode.none and remaining == []
        await cluster.settle()
        s0, _ = await cluster.state("t", 0)
        s1, _ = await cluster.state("t", 1)
        s2, _ = await cluster.state("t", 2)
        assert (s0.leader, s0.isr, s0.leader_epoch) == (2, (2, 3), 1)
        assert (s1.leader, s1.isr, s1.leader_epoch) == (2, (2, 3), 1)
        assert s2.leader == 1  # a single replica cannot move
        assert ("t", 1, False) in cluster.brokers[1].stopped()
        # a broker that is shutting down is not eligible for the ISR
        proposal = requests.IsrProposal(None, "t", 0, 1, (2, 3, 1), (-1, -1, -1), 0, 1)
        _, results = await c.call(lambda term: requests.alter_partition(term, 2, -1, [proposal]))
        assert results[0].error == ErrorCode.ineligible_replica
        stale = await c.call(lambda term: requests.controlled_shutdown(term, 2, 12345))
        assert stale[0] == ErrorCode.stale_broker_epoch

    run(scenario)


def test_preferred_election_and_auto_rebalance() -> None:
    async def scenario(cluster: Cluster) -> None:
        await cluster.start(1, 2, 3)
        await cluster.create_topic("t", {0: [1, 2], 1: [1, 3], 2: [2, 3]})
        await cluster.kill(1)
        await cluster.start(1)
        await cluster.settle(lambda: any(c.active for c in cluster.controllers.values()))
        c = cluster.active()
        s0, _ = await cluster.state("t", 0)
        assert s0.leader == 2 and 1 not in s0.isr
        r = await c.call(lambda term: requests.elect_leaders(term, 0, [("t", 0), ("t", 2)]))
        assert r[("t", 0)][0] == ErrorCode.preferred_leader_not_available
        assert r[("t", 2)][0] == ErrorCode.election_not_needed
        for p, isr in ((0, (2, 1)), (1, (3, 1))):
            s, v = await cluster.state("t", p)
            proposal = requests.IsrProposal(None, "t", p, s.leader_epoch, isr, (-1, -1), 0, v)
            _, res = await c.call(lambda term, pr=proposal, leader=s.leader: requests.alter_partition(
                term, leader, -1, [pr]))  # fmt: skip
            assert res[0].error == ErrorCode.none
        moved = await c.call(lambda term: requests.rebalance(term))
        assert moved == {("t", 0), ("t", 1)}
        for p in (0, 1):
            s, _ = await cluster.state("t", p)
            assert s.leader == 1 and s.leader_epoch == 2
        assert await c.call(lambda term: requests.rebalance(term)) == set()

    run(scenario)


def test_delete_topic_stops_replicas_then_removes_nodes() -> None:
    async def scenario(cluster: Cluster) -> None:
        from strom.controller import topics

        await cluster.start(1, 2, 3)
        await cluster.create_topic("t", {0: [1, 2], 1: [2, 3]})
        await topics.request_deletion(cluster.admin, "t")
        assert await topics.wait_for_deletion(cluster.admin, "t", 5.0)
        assert await cluster.admin.exists("/brokers/topics/t") is None
        assert await cluster.admin.exists("/config/topics/t") is None
        assert ("t", 0, True) in cluster.brokers[1].stopped()
        assert {("t", 0, True), ("t", 1, True)} <= cluster.brokers[2].stopped()
        assert cluster.brokers[1].metadata()[("t", 1)].leader == -2  # announced deleted
        assert "t" not in cluster.active().ctx.topics  # type: ignore[union-attr]
        # the name can be used again
        await cluster.create_topic("t", {0: [3]})
        s, v = await cluster.state("t", 0)
        assert (s.leader, v) == (3, 0)

    run(scenario)


def test_partitions_added_get_states() -> None:
    async def scenario(cluster: Cluster) -> None:
        from strom.controller import topics

        await cluster.start(1, 2)
        await cluster.create_topic("t", {0: [1, 2]})
        await topics.add_partitions(cluster.admin, "t", {1: [2, 1], 2: [1, 2]})
        assert await topics.wait_for_partitions(cluster.admin, "t", [1, 2], 5.0)
        await cluster.settle()
        s1, _ = await cluster.state("t", 1)
        assert s1.leader == 2 and s1.isr == (2, 1)
        assert cluster.brokers[1].leader_and_isr()[("t", 2)].is_new

    run(scenario)


def test_failover_keeps_states_and_resends_them() -> None:
    async def scenario(cluster: Cluster) -> None:
        await cluster.start(1, 2, 3)
        await cluster.create_topic("t", {0: [1, 2, 3]})
        first = cluster.active().broker_id
        before, version = await cluster.state("t", 0)
        sent = len(cluster.brokers[before.leader].of(LEADER_AND_ISR))
        await cluster.kill(first)
        await cluster.settle(lambda: any(c.active for c in cluster.controllers.values()))
        after, after_version = await cluster.state("t", 0)
        if before.leader != first:  # its leader lived on: the state is the same one
            assert (after, after_version) == (before, version)
            assert len(cluster.brokers[before.leader].of(LEADER_AND_ISR)) > sent
        else:
            assert after.leader != first and after.leader_epoch == before.leader_epoch + 1

    run(scenario, settings=ControllerSettings(auto_rebalance=False))


def test_context_elections_are_kafkas() -> None:
    from strom.controller import context as c
    from strom.controller.context import LiveBroker
    from strom.metadata.zk_model import BrokerRegistration, Endpoint

    ctx = ControllerContext()
    for b in (1, 2, 3):
        ctx.brokers[b] = LiveBroker(BrokerRegistration(b, (Endpoint("PLAINTEXT", "h", b),)), b)
    assert c.offline_election(ctx, [4, 2, 3], [3, 2], False) == (2, (3, 2))
    assert c.offline_election(ctx, [4, 5], [4], False) is None
    assert c.offline_election(ctx, [4, 3, 2], [4], True) == (3, (3,))
    assert c.preferred_election(ctx, [2, 3], [3]) is None
    assert c.preferred_election(ctx, [2, 3], [3, 2]) == (2, (3, 2))
    ctx.offline_dirs[2] = {("t", 0)}  # its replica of t-0 is in an offline log directory
    assert c.preferred_election(ctx, [2, 3], [3, 2], ("t", 0)) is None
    assert c.preferred_election(ctx, [2, 3], [3, 2], ("t", 1)) == (2, (3, 2))
    ctx.offline_dirs.clear()
    ctx.shutting_down.add(2)
    assert c.shutdown_election(ctx, [2, 3, 1], [2, 1, 3]) == (3, (1, 3))
    assert PartitionState.from_json(PartitionState(1, 2, (1,), 3).to_json()).leader_epoch == 2


def test_cluster_admin_path_assigns_over_live_racks_and_waits_for_the_controller() -> None:
    async def scenario(cluster: Cluster) -> None:
        from strom.controller import admin
        from strom.protocol.errors import KafkaError

        await cluster.start(1, 2, 3, 4)
        live = await admin.live_brokers(cluster.admin)
        assert live == {1: "a", 2: "a", 3: "b", 4: "b"}
        await admin.create_topic(cluster.admin, "t", 4, 2, {"retention.ms": "5"}, None, live, 5.0)
        doc, _ = await admin.topics.read_topic(cluster.admin, "t")
        for p, replicas in doc.assignment.items():
            assert {live[b] for b in replicas} == {"a", "b"}, replicas  # one replica per rack
            state, _ = await cluster.state("t", p)
            assert state.leader == replicas[0]
        assert sorted(r[0] for r in doc.assignment.values()) == [1, 2, 3, 4]  # leaders spread
        try:
            await admin.create_topic(cluster.admin, "t", 1, 1, {}, None, live, 5.0)
        except KafkaError as exc:
            assert exc.error_code == ErrorCode.topic_already_exists
        else:
            raise AssertionError("created twice")
        await admin.add_partitions(cluster.admin, "t", 6, [[4, 1], [3, 2]], live, 5.0, False)
        s5, _ = await cluster.state("t", 5)
        assert s5.leader == 3
        try:
            await admin.add_partitions(cluster.admin, "t", 7, [[4, 9]], live, 5.0, False)
        except KafkaError as exc:
            assert exc.error_code == ErrorCode.invalid_replica_assignment
        else:
            raise AssertionError("unknown broker accepted")
        name, topic_id = await admin.delete_topic(cluster.admin, None, doc.topic_id, 5.0)
        assert (name, topic_id) == ("t", doc.topic_id)
        assert await cluster.admin.exists("/brokers/topics/t") is None

    run(scenario, racks={1: "a", 2: "a", 3: "b", 4: "b"})


def test_controlled_shutdown_of_the_controllers_own_broker() -> None:
    async def scenario(cluster: Cluster) -> None:
        from strom.broker.controller_channel import controlled_shutdown

        await cluster.start(1, 2, 3)
        await cluster.create_topic("t", {0: [1, 2], 1: [1, 3], 2: [2, 1]})
        c = cluster.active()
        me = c.broker_id
        assert await controlled_shutdown(c.store, me, c, retries=2, backoff=0.01)
        await cluster.settle()
        for p in range(3):
            state, _ = await cluster.state("t", p)
            assert state.leader != me and me not in state.isr, (p, state)
        # a broker that is not registered cannot shut down through the controller
        assert not await controlled_shutdown(c.store, 42, c, retries=1, backoff=0.01)

    run(scenario)
