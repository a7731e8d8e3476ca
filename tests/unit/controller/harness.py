"""Several controllers on one in-memory tree, with brokers that record what they are sent."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from strom.controller import Controller, ControllerSettings
from strom.controller import topics as topic_admin
from strom.metadata.zk_model import (
    BrokerRegistration,
    Endpoint,
    PartitionState,
    broker_path,
    partition_state_path,
)
from strom.protocol.interbroker import LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA
from tests.unit.controller.fakestore import Session, Tree


@dataclass
class FakeBroker:
    """Answers the controller like a broker; refuses an epoch lower than one it has seen."""

    broker_id: int
    received: list[tuple[int, Any]] = field(default_factory=list)
    refused: list[tuple[int, Any]] = field(default_factory=list)
    max_epoch: int = 0

    async def handle(self, api_key: int, api_version: int, request: Any) -> Any:
        if request.controller_epoch < self.max_epoch:
            self.refused.append((api_key, request))
            return SimpleNamespace(error_code=11)  # STALE_CONTROLLER_EPOCH
        self.max_epoch = request.controller_epoch
        self.received.append((api_key, request))
        return SimpleNamespace(error_code=0)

    def of(self, api_key: int) -> list[Any]:
        return [r for k, r in self.received if k == api_key]

    def leader_and_isr(self) -> dict[tuple[str, int], Any]:
        """The last LeaderAndIsr partition state heard per partition."""
        found = {}
        for r in self.of(LEADER_AND_ISR):
            for t in r.topic_states:
                for p in t.partition_states:
                    found[(t.topic_name, p.partition_index)] = p
        return found

    def stopped(self) -> set[tuple[str, int, bool]]:
        return {(t.topic_name, p.partition_index, p.delete_partition)
                for r in self.of(STOP_REPLICA) for t in r.topic_states
                for p in t.partition_states}  # fmt: skip

    def metadata(self) -> dict[tuple[str, int], Any]:
        found = {}
        for r in self.of(UPDATE_METADATA):
            for t in r.topic_states:
                for p in t.partition_states:
                    found[(t.topic_name, p.partition_index)] = p
        return found


class FakeConnection:
    def __init__(self, broker: FakeBroker) -> None:
        self.broker = broker

    async def send(self, api_key: int, api_version: int, request: Any, timeout: float) -> Any:
        return await self.broker.handle(api_key, api_version, request)

    def close(self, error: Exception | None = None) -> None:
        pass


@dataclass
class FakeNetwork:
    """The controller's network (strom.controller.channel.ControllerNetwork) in memory: every
    broker, its own included, is a :class:`FakeBroker`."""

    own: FakeBroker
    brokers: dict[int, FakeBroker]

    def connect(self, broker_id: int, registration: BrokerRegistration) -> FakeConnection:
        return FakeConnection(self.brokers[broker_id])

    async def local_call(self, api_key: int, api_version: int, request: Any) -> Any:
        return await self.own.handle(api_key, api_version, request)


class Cluster:
    def __init__(self, racks: dict[int, str | None] | None = None,
                 settings: ControllerSettings | None = None) -> None:  # fmt: skip
        self.tree = Tree()
        self.racks = racks or {}
        self.settings = settings or ControllerSettings(auto_rebalance=False)
        self.brokers: dict[int, FakeBroker] = {}
        self.sessions: dict[int, Session] = {}
        self.controllers: dict[int, Controller] = {}
        self.admin = self.tree.session()

    async def add(self, broker_id: int, *, controller: bool = True) -> None:
        fake = self.brokers.setdefault(broker_id, FakeBroker(broker_id))
        session = self.tree.session()
        self.sessions[broker_id] = session
        reg = BrokerRegistration(broker_id, (Endpoint("PLAINTEXT", "127.0.0.1", 9000 + broker_id),),
                                 self.racks.get(broker_id))  # fmt: skip
        await session.create(broker_path(broker_id), reg.to_json(), ephemeral=True)
        if controller:
            c = Controller(session, broker_id, FakeNetwork(fake, self.brokers),
                           settings=self.settings)  # fmt: skip
            self.controllers[broker_id] = c
            await c.start()

    async def start(self, *ids: int) -> None:
        for b in ids:
            await self.add(b)
        await self.settle()

    def active(self) -> Controller:
        found = [c for c in self.controllers.values() if c.active]
        assert len(found) == 1, f"{len(found)} active controllers"
        return found[0]

    async def settle(self, condition: Callable[[], bool] | None = None, timeout: float = 5.0) -> None:
        """Let events, watches and channels run until ``condition`` (bounded)."""
        deadline = time.monotonic() + timeout
        while True:
            for _ in range(5):
                await asyncio.sleep(0)
            for c in list(self.controllers.values()):
                await asyncio.wait_for(c.idle(), timeout)
            if condition is None or condition():
                await asyncio.sleep(0.01)
                if condition is None or condition():
                    return
            assert time.monotonic() < deadline, "condition not reached in time"
            await asyncio.sleep(0.01)

    async def kill(self, broker_id: int) -> None:
        """kill -9: the session expires, ephemerals go."""
        c = self.controllers.pop(broker_id, None)
        self.tree.expire(self.sessions[broker_id])
        if c is not None:
            await asyncio.sleep(0)
            await c.stop()
        await self.settle()

    async def create_topic(self, name: str, assignment: dict[int, list[int]],
                           configs: dict[str, str] | None = None) -> None:  # fmt: skip
        await topic_admin.create_topic(self.admin, name, assignment, configs or {})
        assert await topic_admin.wait_for_partitions(self.admin, name, list(assignment), 5.0)
        await self.settle()

    async def state(self, topic: str, partition: int) -> tuple[PartitionState, int]:
        data, stat = await self.admin.get(partition_state_path(topic, partition))
        return PartitionState.from_json(data), stat.version

    async def set_topic_config(self, topic: str, configs: dict[str, str]) -> None:
        await self.admin.set(f"/config/topics/{topic}", json.dumps({"config": configs}).encode())

    async def stop(self) -> None:
        for c in self.controllers.values():
            await c.stop()


def run(scenario: Callable[[Cluster], Awaitable[None]], **kwargs: Any) -> None:
    async def main() -> None:
        cluster = Cluster(**kwargs)
        try:
            await asyncio.wait_for(scenario(cluster), 30)
        finally:
            await cluster.stop()

    asyncio.run(main())
