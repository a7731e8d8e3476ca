"""TopicRegistry: Kafka's topic documents, and a view kept current by watches, so a registry
sees what another one (another broker) wrote. Run on the embedded store (two registries on one
store) and on ZooKeeper (two sessions)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.broker.producer_ids import BLOCK_SIZE, PATH, ProducerIdManager
from strom.metadata.embedded import EmbeddedStore
from strom.metadata.store import MetadataStore
from strom.metadata.topics import TopicRegistry, uuid_from_kafka, uuid_to_kafka
from strom.metadata.zookeeper import ZooKeeperStore
from strom.protocol.errors import ErrorCode, KafkaError
from strom.testing.zookeeper import ZooKeeperProcess, zookeeper_available

needs_zk = pytest.mark.skipif(not zookeeper_available(), reason="apt-get install -y zookeeper")


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperProcess]:
    with ZooKeeperProcess(tmp_path_factory.mktemp("zk")) as zk:
        yield zk


@pytest.fixture(params=["embedded", pytest.param("zookeeper", marks=needs_zk)])
def two_stores(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Callable[[], tuple[MetadataStore, MetadataStore]]:
    """Two sessions on one namespace (embedded: one store, as two registries of one node)."""
    if request.param == "embedded":

        def embedded() -> tuple[MetadataStore, MetadataStore]:
            store = EmbeddedStore(tmp_path)
            return store, store

        return embedded
    zk: ZooKeeperProcess = request.getfixturevalue("zookeeper")
    connect = f"{zk.connect_string}/reg-{uuid.uuid4().hex[:8]}"
    return lambda: (ZooKeeperStore(connect), ZooKeeperStore(connect))


async def eventually(predicate: Callable[[], bool], what: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def test_kafka_uuid_form() -> None:
    u = uuid.UUID("5d3e5e6a-8f0b-4c4e-9d6f-3c1e2a4b5c6d")
    text = uuid_to_kafka(u)
    assert len(text) == 22 and "=" not in text and uuid_from_kafka(text) == u
    assert uuid_from_kafka(str(u)) == u  # strom's older hex form


def test_a_second_registry_follows_every_change(
    two_stores: Callable[[], tuple[MetadataStore, MetadataStore]],
) -> None:
    async def scenario() -> None:
        a_store, b_store = two_stores()
        await a_store.start()
        if b_store is not a_store:
            await b_store.start()
        a, b = TopicRegistry(a_store), TopicRegistry(b_store)
        await a.start()
        await b.start()
        heard: list[tuple[str, bool]] = []
        b.add_listener(lambda name, info: heard.append((name, info is not None)))
        try:
            made = await a.create("t1", {0: [1, 2], 1: [2, 1]}, {"retention.ms": "100"})
            assert a.get("t1") is made  # read-your-writes
            await eventually(lambda: b.get("t1") is not None, "b to see t1")
            seen = b.get("t1")
            assert seen is not None and seen.topic_id == made.topic_id
            assert seen.replicas == {0: [1, 2], 1: [2, 1]} and seen.configs == {"retention.ms": "100"}
            assert b.by_id(made.topic_id) is seen
            with pytest.raises(KafkaError) as err:
                await b.create("t1", {0: [1]}, {})
            assert err.value.error_code == ErrorCode.topic_already_exists

            await a.add_partitions("t1", {2: [1, 2]})
            await eventually(lambda: (i := b.get("t1")) is not None and i.partition_count == 3,
                             "b to see the new partition")  # fmt: skip
            assert not await a_store.exists("/config/changes")  # a creation announces nothing
            await a.set_configs("t1", {"retention.ms": "200", "cleanup.policy": "compact"})
            await eventually(lambda: (i := b.get("t1")) is not None
                             and i.configs.get("retention.ms") == "200", "b to see the configs")
            # announced for Kafka's brokers sharing the store, as Kafka's AdminZkClient does
            [node] = await a_store.children("/config/changes")
            assert json.loads((await a_store.get(f"/config/changes/{node}"))[0]) == {
                "version": 2, "entity_path": "topics/t1"}
            # b's view is current: its own conditional write succeeds on a's change
            await b.add_partitions("t1", {3: [2, 1]})
            await eventually(lambda: (i := a.get("t1")) is not None and i.partition_count == 4,
                             "a to see b's partition")  # fmt: skip

            await a.delete("t1")
            assert a.get("t1") is None
            await eventually(lambda: b.get("t1") is None, "b to see t1 go")
            await a.create("t1", {0: [1]}, {})  # made again: a new id, seen again
            await eventually(lambda: (i := b.get("t1")) is not None and i.partition_count == 1,
                             "b to see t1 again")  # fmt: skip
            assert ("t1", True) in heard and ("t1", False) in heard
        finally:
            await a.close()
            await b.close()
            await a_store.close()
            if b_store is not a_store:
                await b_store.close()

    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_load_reads_a_topic_another_broker_wrote_at_once_with_its_configs(
    two_stores: Callable[[], tuple[MetadataStore, MetadataStore]],
) -> None:
    """What the LeaderAndIsr handler does for a topic its watch has not brought yet: read it
    (never write it, which would replace its configs)."""

    async def scenario() -> None:
        a_store, b_store = two_stores()
        await a_store.start()
        if b_store is not a_store:
            await b_store.start()
        b = TopicRegistry(b_store)
        await b.start()
        try:
            assert await b.load("t2") is None  # nothing in the store: nothing made up
            topic_id = uuid.uuid4()
            await a_store.create("/config/topics/t2", json.dumps(
                {"version": 1, "config": {"retention.ms": "12345"}}).encode())  # fmt: skip
            await a_store.create("/brokers/topics/t2", json.dumps(
                {"version": 3, "partitions": {"0": [1, 2]}, "topic_id": uuid_to_kafka(topic_id),
                 "adding_replicas": {}, "removing_replicas": {}}).encode())  # fmt: skip
            info = await b.load("t2")
            assert info is not None and b.get("t2") is info
            assert (info.topic_id, info.replicas, info.configs) == (
                topic_id, {0: [1, 2]}, {"retention.ms": "12345"})  # fmt: skip
            data, _ = await a_store.get("/config/topics/t2")
            assert json.loads(data)["config"] == {"retention.ms": "12345"}  # untouched
        finally:
            await b.close()
            await a_store.close()
            if b_store is not a_store:
                await b_store.close()

    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_topics_path_made_between_the_two_reads_of_start_is_not_missed(tmp_path: Path) -> None:
    """``/brokers/topics`` absent when the registry lists it and made (with a topic) before its
    ``exists`` watch is set: the watch would never fire for the children, so they are read
    again (a broker starting with the controller missed ``__consumer_offsets`` that way)."""

    class Racing(EmbeddedStore):
        raced = False

        async def exists(self, path: str, watch: Any = None) -> Any:
            if path == "/brokers/topics" and not self.raced:
                self.raced = True
                await self.create("/brokers/topics/t3", json.dumps(
                    {"version": 3, "partitions": {"0": [1]},
                     "topic_id": uuid_to_kafka(uuid.uuid4())}).encode())  # fmt: skip
            return await super().exists(path, watch)

    async def scenario() -> None:
        store = Racing(tmp_path)
        await store.start()
        registry = TopicRegistry(store)
        try:
            await registry.start()
            assert store.raced
            await eventually(lambda: registry.get("t3") is not None, "the registry to see t3")
        finally:
            await registry.close()
            await store.close()

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_documents_are_kafkas_and_old_ones_are_read(tmp_path: Path) -> None:
    old_id = uuid.uuid4()

    async def scenario() -> None:
        store = EmbeddedStore(tmp_path)
        # strom's first format, and Kafka's version 1 (no id)
        await store.create("/brokers/topics/old", json.dumps(
            {"id": str(old_id), "partitions": {"0": [1], "1": [1]}}).encode())  # fmt: skip
        await store.create("/config/topics/old", json.dumps({"config": {"a": "b"}}).encode())
        await store.create("/brokers/topics/v1", b'{"version":1,"partitions":{"0":[1]}}')
        registry = TopicRegistry(store)
        await registry.start()
        old = registry.get("old")
        assert old is not None and old.topic_id == old_id and old.replicas == {0: [1], 1: [1]}
        assert old.configs == {"a": "b"}
        v1 = registry.get("v1")
        assert v1 is not None
        doc = json.loads((await store.get("/brokers/topics/v1"))[0])
        assert doc["version"] == 3 and uuid_from_kafka(doc["topic_id"]) == v1.topic_id

        await registry.create("new", {0: [1]}, {"retention.ms": "5"})
        doc = json.loads((await store.get("/brokers/topics/new"))[0])
        assert doc == {"version": 3, "partitions": {"0": [1]},
                       "topic_id": uuid_to_kafka(registry.get("new").topic_id),  # type: ignore[union-attr]
                       "adding_replicas": {}, "removing_replicas": {}}  # fmt: skip
        cfg = json.loads((await store.get("/config/topics/new"))[0])
        assert cfg == {"version": 1, "config": {"retention.ms": "5"}}
        await registry.close()
        await store.close()

    asyncio.run(scenario())


def test_producer_id_blocks_never_overlap(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = EmbeddedStore(tmp_path)
        a, b = ProducerIdManager(store, 1), ProducerIdManager(store, 2)
        await asyncio.gather(a.ensure_available(), b.ensure_available())
        ids_a = [a.next_id() for _ in range(10)]
        ids_b = [b.next_id() for _ in range(10)]
        assert not set(ids_a) & set(ids_b)
        doc = json.loads((await store.get(PATH))[0])
        assert doc["version"] == 1 and doc["broker"] in (1, 2)
        assert int(doc["block_end"]) - int(doc["block_start"]) == BLOCK_SIZE - 1
        for _ in range(BLOCK_SIZE - 10):  # past 90 %: the next block comes in the background
            a.next_id()
        await eventually(lambda: a._prefetched is not None, "the prefetch")
        assert a.next_id() not in ids_b
        await store.close()
        # strom's older document: the next block starts where it says
        (tmp_path / "old").mkdir()
        store = EmbeddedStore(tmp_path / "old")
        await store.create(PATH, b'{"next": 5000}')
        c = ProducerIdManager(store, 3)
        with pytest.raises(RuntimeError):
            c.next_id()  # nothing reserved yet: a retriable error, a reservation started
        await c.ensure_available()
        assert c.next_id() == 5000
        await store.close()

    asyncio.run(scenario())
