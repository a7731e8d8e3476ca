"""The controller on a real ZooKeeper (Debian's package): election, failover at a session
expiry with a higher epoch, leader moved off the lost broker, the deposed controller standing
again without taking the office back. Brokers are the recording fakes of the harness."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator

import pytest

from strom.controller import Controller, ControllerSettings
from strom.controller import topics as topic_admin
from strom.metadata.zk_model import BrokerRegistration, Endpoint, PartitionState
from strom.metadata.zookeeper import ZooKeeperStore
from strom.testing.zookeeper import ZooKeeperProcess, zookeeper_available
from tests.unit.controller.harness import FakeBroker, FakeNetwork

pytestmark = pytest.mark.skipif(not zookeeper_available(), reason="apt-get install -y zookeeper")
SESSION_MS = 4000


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperProcess]:
    zk = ZooKeeperProcess(tmp_path_factory.mktemp("zk"))
    zk.start()
    try:
        yield zk
    finally:
        zk.stop()


async def _until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def test_failover_on_session_expiry(zookeeper: ZooKeeperProcess) -> None:
    connect = f"{zookeeper.connect_string}/ctl-{uuid.uuid4().hex[:8]}"

    async def main() -> None:
        fakes = {b: FakeBroker(b) for b in (1, 2, 3)}
        stores = {b: ZooKeeperStore(connect, session_timeout_ms=SESSION_MS,
                                    connection_timeout_ms=10_000) for b in fakes}  # fmt: skip
        admin = ZooKeeperStore(connect, session_timeout_ms=20_000)
        controllers: dict[int, Controller] = {}
        await admin.start()
        try:
            for b, store in stores.items():
                await store.start()
                reg = BrokerRegistration(b, (Endpoint("PLAINTEXT", "127.0.0.1", 9000 + b),))
                await store.create(f"/brokers/ids/{b}", reg.to_json(), ephemeral=True)
                controllers[b] = Controller(
                    store, b, FakeNetwork(fakes[b], fakes),
                    settings=ControllerSettings(auto_rebalance=False))  # fmt: skip
                await controllers[b].start()

            def actives() -> list[Controller]:
                return [c for c in controllers.values() if c.active]

            await _until(lambda: len(actives()) == 1, 20, "a controller")
            first = actives()[0]
            assert first.epoch == 1
            # the partition is led by the controller's own broker, so its loss moves both
            replicas = [first.broker_id] + [b for b in fakes if b != first.broker_id]
            await topic_admin.create_topic(admin, "t", {0: replicas}, {})
            assert await topic_admin.wait_for_partitions(admin, "t", [0], 20)
            data, _ = await admin.get("/brokers/topics/t/partitions/0/state")
            assert PartitionState.from_json(data).leader == first.broker_id

            await stores[first.broker_id].expire_session_for_tests()
            await _until(lambda: any(c.active and c is not first for c in controllers.values()),
                         30, "a new controller")  # fmt: skip
            second = next(c for c in controllers.values() if c.active and c is not first)
            assert second.epoch == 2
            epoch, _ = await admin.get("/controller_epoch")
            assert epoch == b"2"

            async def state() -> PartitionState:
                raw, _ = await admin.get("/brokers/topics/t/partitions/0/state")
                return PartitionState.from_json(raw)

            deadline = time.monotonic() + 20
            while (await state()).leader == first.broker_id:
                assert time.monotonic() < deadline, "leader not moved"
                await asyncio.sleep(0.05)
            moved = await state()
            assert moved.leader == replicas[1] and moved.leader_epoch == 1
            assert first.broker_id not in moved.isr and moved.controller_epoch == 2
            # the deposed controller got a new session and stood again, without winning
            await _until(lambda: first.active_id == second.broker_id, 30, "the old one to follow")
            assert not first.active and len(actives()) == 1
            assert all(p.controller_epoch == 2
                       for p in [fakes[replicas[1]].leader_and_isr()[("t", 0)]])  # fmt: skip
        finally:
            for c in controllers.values():
                await c.stop()
            for store in stores.values():
                await store.close()
            await admin.close()

    asyncio.run(asyncio.wait_for(main(), 120))
