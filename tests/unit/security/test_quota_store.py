"""Quota configs in the metadata store (strom.security.quota_store), on the embedded store and
on ZooKeeper: Kafka's nodes and documents, other owners' keys kept, every store's cache
updated by its watches (a second broker's QuotaStore on its own session)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from strom.metadata import config_changes
from strom.metadata.embedded import EmbeddedStore
from strom.metadata.store import MetadataStore
from strom.metadata.zookeeper import ZooKeeperStore
from strom.security.quota_store import QuotaStore, entity_path, path_entity
from strom.security.quotas import DEFAULT, ClientQuotas, Entity, QuotaError
from strom.testing.zookeeper import ZooKeeperProcess, zookeeper_available

needs_zk = pytest.mark.skipif(not zookeeper_available(), reason="apt-get install -y zookeeper")
P, C = "producer_byte_rate", "consumer_byte_rate"


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperProcess]:
    zk = ZooKeeperProcess(tmp_path_factory.mktemp("zk"))
    zk.start()
    try:
        yield zk
    finally:
        zk.stop()


Opener = Callable[[], Awaitable[MetadataStore]]


@pytest.fixture(params=["embedded", pytest.param("zookeeper", marks=needs_zk)])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Opener:
    """Opens the store a second broker would use: ZooKeeper a new session on the same
    namespace, embedded the same store (one process)."""
    if request.param == "embedded":
        shared: list[MetadataStore] = []

        async def open_embedded() -> MetadataStore:
            if not shared:
                shared.append(EmbeddedStore(tmp_path))
                await shared[0].start()
            return shared[0]

        return open_embedded
    zk: ZooKeeperProcess = request.getfixturevalue("zookeeper")
    connect = f"{zk.connect_string}/quotas-{uuid.uuid4().hex[:8]}"

    async def open_zk() -> MetadataStore:
        store = ZooKeeperStore(connect, session_timeout_ms=4000, connection_timeout_ms=10_000)
        await store.start()
        return store

    return open_zk


async def eventually(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "not applied in time"
        await asyncio.sleep(0.02)


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_paths_are_kafkas() -> None:
    for entity, path in ((Entity("alice", None), "/config/users/alice"),
                         (Entity(None, DEFAULT), "/config/clients/<default>"),
                         (Entity(DEFAULT, "c%20d"), "/config/users/<default>/clients/c%20d")):  # fmt: skip
        assert entity_path(entity) == path
        assert path_entity(path) == entity
    assert path_entity("/config/users") is None
    assert path_entity("/config/users/a/clients") is None


def test_alter_writes_kafkas_document_and_keeps_other_keys(opener: Opener) -> None:
    async def scenario() -> None:
        store = await opener()
        # a user node as the SCRAM work writes it
        await store.create("/config/users/alice",
                           json.dumps({"version": 1, "config": {"SCRAM-SHA-256": "x"}}).encode())
        quotas = QuotaStore(store, ClientQuotas())
        await quotas.start()
        try:
            await quotas.alter(Entity("alice", None), [(P, 1024.0, False), (C, 2048.0, False)])
            doc = json.loads((await store.get("/config/users/alice"))[0])
            assert doc == {"version": 1, "config": {"SCRAM-SHA-256": "x", P: "1024", C: "2048"}}
            assert quotas.quotas.get(Entity("alice", None)) == {P: 1024.0, C: 2048.0}
            await quotas.alter(Entity("alice", None), [(P, 0.0, True)])
            doc = json.loads((await store.get("/config/users/alice"))[0])
            assert doc["config"] == {"SCRAM-SHA-256": "x", C: "2048"}
            # validate_only writes nothing; a refused op writes nothing
            await quotas.alter(Entity(None, "c"), [(P, 5.0, False)], validate_only=True)
            assert await store.exists("/config/clients/c") is None
            with pytest.raises(QuotaError):
                await quotas.alter(Entity(None, "c"), [(P, 5.0, False), ("bad", 1.0, False)])
            assert await store.exists("/config/clients/c") is None
            await quotas.alter(Entity(DEFAULT, "c"), [(P, 7.0, False)])
            assert await store.exists("/config/users/<default>/clients/c") is not None
            # each write announced as Kafka's AdminZkClient does, for Kafka's brokers, in
            # order; validate_only and refused alterations announce nothing
            assert await _notifications(store) == [
                "users/alice", "users/alice", "users/<default>/clients/c"]
        finally:
            await quotas.close()
            await store.close()

    run(scenario)


async def _notifications(store: MetadataStore) -> list[str]:
    """The entity paths of /config/changes' notifications, oldest first (checked to be
    Kafka's sequential nodes and version-2 documents)."""
    out = []
    for node in await store.children("/config/changes"):
        assert node.startswith("config_change_") and len(node) == len("config_change_") + 10
        doc = json.loads((await store.get(f"/config/changes/{node}"))[0])
        assert doc["version"] == 2 and set(doc) == {"version", "entity_path"}
        out.append(doc["entity_path"])
    return out


def test_change_notifications_are_pruned_to_the_newest(opener: Opener) -> None:
    async def scenario() -> None:
        store = await opener()
        try:
            for i in range(config_changes.KEEP + 5):
                await config_changes.notify(store, f"clients/c{i}")
            nodes = await store.children("/config/changes")
            assert len(nodes) == config_changes.KEEP
            assert (await _notifications(store))[0] == "clients/c5"
            assert (await _notifications(store))[-1] == f"clients/c{config_changes.KEEP + 4}"
        finally:
            await store.close()

    run(scenario)


def test_every_broker_sees_changes_without_restart(opener: Opener) -> None:
    async def scenario() -> None:
        one, two = await opener(), await opener()
        writer = QuotaStore(one, ClientQuotas())
        await writer.start()
        await writer.alter(Entity(None, "early"), [(P, 1.0, False)])
        reader = QuotaStore(two, ClientQuotas())
        await reader.start()  # loads what exists
        seen = reader.quotas
        try:
            assert seen.get(Entity(None, "early")) == {P: 1.0}
            await writer.alter(Entity(None, "early"), [(P, 2.0, False)])  # data change
            await eventually(lambda: seen.get(Entity(None, "early")) == {P: 2.0})
            await writer.alter(Entity("bob", None), [(C, 3.0, False)])  # new user
            await eventually(lambda: seen.get(Entity("bob", None)) == {C: 3.0})
            await writer.alter(Entity("bob", "x"), [(P, 4.0, False)])  # new user's client
            await eventually(lambda: seen.get(Entity("bob", "x")) == {P: 4.0})
            await writer.alter(Entity("bob", "y"), [(P, 5.0, False)])  # another client of bob
            await eventually(lambda: seen.get(Entity("bob", "y")) == {P: 5.0})
            assert seen.active
            # written by someone else (the SCRAM work, kafka-configs): a quota key added
            await one.set("/config/clients/early", json.dumps(
                {"version": 1, "config": {P: "9", "other": "1"}}).encode())
            await eventually(lambda: seen.get(Entity(None, "early")) == {P: 9.0})
            await one.delete("/config/users/bob", recursive=True)  # nodes removed
            await eventually(lambda: seen.get(Entity("bob", None)) == {}
                             and seen.get(Entity("bob", "x")) == {})  # fmt: skip
            await writer.alter(Entity("bob", None), [(C, 6.0, False)])  # and made again
            await eventually(lambda: seen.get(Entity("bob", None)) == {C: 6.0})
            await writer.alter(Entity(None, "early"), [(P, 0.0, True)])
            await writer.alter(Entity("bob", None), [(C, 0.0, True)])
            await eventually(lambda: not seen.entities)
            assert not seen.active
        finally:
            await reader.close()
            await writer.close()
            await two.close()
            if two is not one:
                await one.close()

    run(scenario)
