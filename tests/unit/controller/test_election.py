"""The controller's office: one winner, epochs that only grow, fencing of a deposed controller."""

from __future__ import annotations

from types import SimpleNamespace

from strom.controller import NotControllerError, requests
from strom.metadata.store import DeleteOp
from strom.metadata.zk_model import CONTROLLER_EPOCH_PATH, CONTROLLER_PATH, ControllerRegistration
from strom.protocol.interbroker import LEADER_AND_ISR, UPDATE_METADATA
from tests.unit.controller.harness import Cluster, run


async def _office(cluster: Cluster) -> tuple[int, int]:
    data, _ = await cluster.admin.get(CONTROLLER_PATH)
    epoch, _ = await cluster.admin.get(CONTROLLER_EPOCH_PATH)
    return ControllerRegistration.from_json(data).broker_id, int(epoch)


def test_one_controller_elected_epoch_one_and_everyone_knows_it() -> None:
    async def scenario(cluster: Cluster) -> None:
        await cluster.start(1, 2, 3)
        active = cluster.active()
        assert await _office(cluster) == (active.broker_id, 1)
        assert active.epoch == 1
        for c in cluster.controllers.values():
            assert c.active_id == active.broker_id
        # every broker got UpdateMetadata from the controller, at its epoch
        for fake in cluster.brokers.values():
            ums = fake.of(UPDATE_METADATA)
            assert ums and ums[-1].controller_epoch == 1
            assert {b.id_ for b in ums[-1].live_brokers} == {1, 2, 3}
            assert ums[-1].controller_id == active.broker_id

    run(scenario)


def test_controller_loss_elects_another_with_a_higher_epoch() -> None:
    async def scenario(cluster: Cluster) -> None:
        await cluster.start(1, 2, 3)
        first = cluster.active()
        await cluster.kill(first.broker_id)
        await cluster.settle(lambda: any(c.active for c in cluster.controllers.values()))
        second = cluster.active()
        assert second.broker_id != first.broker_id
        assert await _office(cluster) == (second.broker_id, 2)
        await cluster.kill(second.broker_id)
        await cluster.settle(lambda: any(c.active for c in cluster.controllers.values()))
        third = cluster.active()
        assert await _office(cluster) == (third.broker_id, 3)
        assert third.broker_id not in (first.broker_id, second.broker_id)

    run(scenario)


def test_a_deposed_controller_changes_nothing_and_its_requests_carry_the_old_epoch() -> None:
    async def scenario(cluster: Cluster) -> None:
        await cluster.start(1, 2, 3)
        await cluster.create_topic("t", {0: [1, 2, 3]})
        zombie = cluster.active()
        before, version = await cluster.state("t", 0)
        # The store has expired the zombie's session (as after a SIGSTOP past the session
        # timeout): its /controller is gone, but the zombie has not been told yet.
        cluster.tree.drop_watches(cluster.sessions[zombie.broker_id])
        cluster.tree.run([DeleteOp(CONTROLLER_PATH)], 0)
        await cluster.settle(lambda: sum(c.active for c in cluster.controllers.values()) == 2)
        new = next(c for c in cluster.controllers.values() if c.active and c is not zombie)
        assert new.epoch == 2 and zombie.epoch == 1
        # The zombie tries to move a leadership: its fenced write is refused and it resigns.
        try:
            await zombie.call(lambda term: requests.controlled_shutdown(term, before.leader, -1))
        except NotControllerError:
            pass
        else:
            raise AssertionError("the zombie's controlled shutdown succeeded")
        await cluster.settle(lambda: not zombie.active and zombie.active_id == new.broker_id)
        assert await cluster.state("t", 0) == (before, version)
        # brokers that heard epoch 2 refuse anything the zombie sent at epoch 1
        fake = cluster.brokers[before.leader]
        assert fake.max_epoch == 2
        stale = await fake.handle(LEADER_AND_ISR, 7, SimpleNamespace(controller_epoch=1))
        assert stale.error_code == 11 and fake.refused

    run(scenario)


def test_session_suspended_resigns_at_once() -> None:
    async def scenario(cluster: Cluster) -> None:
        await cluster.start(1, 2)
        active = cluster.active()
        sent_before = {b: len(f.received) for b, f in cluster.brokers.items()}
        active.store.notify(active.store.state.SUSPENDED)  # type: ignore[attr-defined]
        await cluster.settle(lambda: not active.active)
        assert active.office is None and active.ctx is None
        assert {b: len(f.received) for b, f in cluster.brokers.items()} == sent_before

    run(scenario)


def test_on_the_embedded_store_the_single_broker_wins_and_epochs_survive_restarts(tmp_path) -> None:
    """The same controller on the real embedded store (one session, persisted to disk)."""
    import asyncio

    from strom.controller import Controller, ControllerSettings
    from strom.controller import topics as topic_admin
    from strom.metadata.embedded import EmbeddedStore
    from strom.metadata.zk_model import BrokerRegistration, Endpoint, PartitionState
    from tests.unit.controller.harness import FakeBroker, FakeNetwork

    async def one_life(expected_epoch: int) -> PartitionState:
        store = EmbeddedStore(tmp_path)
        await store.start()
        fake = FakeBroker(1)
        reg = BrokerRegistration(1, (Endpoint("PLAINTEXT", "127.0.0.1", 9001),))
        await store.create("/brokers/ids/1", reg.to_json(), ephemeral=True)
        c = Controller(store, 1, FakeNetwork(fake, {1: fake}),
                       settings=ControllerSettings(auto_rebalance=False))  # fmt: skip
        await c.start()
        try:
            for _ in range(100):
                if c.active:
                    break
                await asyncio.sleep(0.01)
            assert c.epoch == expected_epoch
            if expected_epoch == 1:
                await topic_admin.create_topic(store, "t", {0: [1]}, {})
            assert await topic_admin.wait_for_partitions(store, "t", [0], 5.0)
            await c.idle()
            data, _ = await store.get("/brokers/topics/t/partitions/0/state")
            assert fake.leader_and_isr()[("t", 0)].leader == 1
            return PartitionState.from_json(data)
        finally:
            await c.stop()
            await store.close()

    first = asyncio.run(one_life(1))
    second = asyncio.run(one_life(2))
    assert (first.leader, first.leader_epoch, first.isr) == (1, 0, (1,))
    assert (second.leader, second.leader_epoch) == (1, 0)  # its leader never left


def test_topic_document_is_kafkas_version_3_and_strom_older_id_is_read() -> None:
    import json
    import uuid

    from strom.controller.context import TopicDoc
    from strom.metadata.topics import parse_topic_document, uuid_to_kafka

    topic_id = uuid.uuid4()
    doc = json.loads(TopicDoc("t", topic_id, {1: [2, 3], 0: [1, 2]}, adding={0: [3]}).to_json())
    assert doc == {"version": 3, "partitions": {"0": [1, 2], "1": [2, 3]},
                   "topic_id": uuid_to_kafka(topic_id), "adding_replicas": {"0": [3]},
                   "removing_replicas": {}}  # fmt: skip
    # the broker's topic registry reads what the controller writes, and the other way round
    assert parse_topic_document("t", json.dumps(doc).encode()) == (topic_id, {0: [1, 2], 1: [2, 3]})
    back = TopicDoc.from_json("t", json.dumps(doc).encode())
    assert (back.topic_id, back.adding, back.removing) == (topic_id, {0: [3]}, {})
    older = json.dumps({"version": 3, "id": str(topic_id), "partitions": {"0": [1]}}).encode()
    assert TopicDoc.from_json("t", older).topic_id == topic_id
