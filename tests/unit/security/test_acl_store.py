"""ACLs in the metadata store: Kafka's ZooKeeper layout, and every broker's copy kept current
by the change notifications (embedded store and ZooKeeper)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from strom.metadata.embedded import EmbeddedStore
from strom.metadata.store import MetadataStore
from strom.metadata.zookeeper import ZooKeeperStore
from strom.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    Authorizer,
    PatternType,
    PermissionType,
    ResourcePattern,
    ResourceType,
)
from strom.security.acl import store as acl_store
from strom.security.acl.store import AclStore
from strom.testing.zookeeper import ZooKeeperProcess, zookeeper_available

needs_zk = pytest.mark.skipif(not zookeeper_available(), reason="apt-get install -y zookeeper")
ALICE = "User:alice"


def binding(name: str, pt: PatternType = PatternType.LITERAL, op: AclOperation = AclOperation.READ,
            rt: ResourceType = ResourceType.TOPIC) -> AclBinding:  # fmt: skip
    return AclBinding(ResourcePattern(rt, name, pt),
                      AccessControlEntry(ALICE, "*", op, PermissionType.ALLOW))  # fmt: skip


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperProcess]:
    zk = ZooKeeperProcess(tmp_path_factory.mktemp("zk"))
    zk.start()
    try:
        yield zk
    finally:
        zk.stop()


@pytest.fixture(params=["embedded", pytest.param("zookeeper", marks=needs_zk)])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], MetadataStore]:
    if request.param == "embedded":
        return lambda: EmbeddedStore(tmp_path)
    zk: ZooKeeperProcess = request.getfixturevalue("zookeeper")
    connect = f"{zk.connect_string}/acls-{uuid.uuid4().hex[:8]}"
    return lambda: ZooKeeperStore(connect, session_timeout_ms=4000, connection_timeout_ms=10_000)


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(scenario(), 60))


async def eventually(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "not within the timeout"
        await asyncio.sleep(0.02)


def test_kafka_layout_and_reload(make_store: Callable[[], MetadataStore]) -> None:
    async def scenario() -> None:
        store = make_store()
        await store.start()
        acls = AclStore(store, Authorizer())
        await acls.start()
        await acls.create([binding("orders"), binding("pay", PatternType.PREFIXED),
                           binding("team/a", rt=ResourceType.GROUP)])  # fmt: skip
        data, _ = await store.get("/kafka-acl/Topic/orders")
        assert json.loads(data) == {"version": 1, "acls": [
            {"principal": ALICE, "permissionType": "Allow", "operation": "Read", "host": "*"}]}
        assert await store.children("/kafka-acl-extended/prefixed/Topic") == ["pay"]
        assert await store.children("/kafka-acl/Group") == ["team%2Fa"]
        changes = await store.children("/kafka-acl-changes")
        assert changes and all(c.startswith("acl_changes_") and len(c) == 22 for c in changes)
        (extended,) = await store.children("/kafka-acl-extended-changes")
        assert json.loads((await store.get(f"/kafka-acl-extended-changes/{extended}"))[0]) == {
            "version": 1, "resourceType": "TOPIC", "name": "pay", "patternType": "PREFIXED"}
        await acls.close()
        # a broker starting later reads them all
        fresh = Authorizer()
        again = AclStore(store, fresh)
        await again.start()
        assert fresh.bindings() == sorted([binding("orders"), binding("pay", PatternType.PREFIXED),
                                           binding("team/a", rt=ResourceType.GROUP)])  # fmt: skip
        removed = await again.delete([AclBindingFilter(ResourceType.TOPIC)])
        assert len(removed[0]) == 2
        assert await store.exists("/kafka-acl/Topic/orders") is None
        await again.close()
        await store.close()

    run(scenario)


def test_changes_reach_another_session(make_store: Callable[[], MetadataStore],
                                       monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    async def scenario() -> None:
        store = make_store()
        await store.start()
        # the embedded store has one session: both "brokers" share it, as a watcher and a writer
        other_store = make_store() if isinstance(store, ZooKeeperStore) else store
        if other_store is not store:
            await other_store.start()
        writer, watcher = Authorizer(), Authorizer()
        w, r = AclStore(store, writer), AclStore(other_store, watcher)
        await w.start()
        await r.start()
        await w.create([binding("t1")])
        await eventually(lambda: watcher.authorize(ALICE, "h", AclOperation.READ,
                                                   ResourceType.TOPIC, "t1"))  # fmt: skip
        await w.delete([AclBindingFilter(name="t1")])
        await eventually(lambda: not watcher.authorize(ALICE, "h", AclOperation.READ,
                                                       ResourceType.TOPIC, "t1"))  # fmt: skip
        # change nodes pruned beyond what the watcher saw: it reads everything again
        monkeypatch.setattr(acl_store, "KEEP_CHANGES", 1)
        for i in range(4):
            await w.create([binding(f"x{i}", PatternType.PREFIXED)])
        await eventually(lambda: len(watcher.bindings()) == 4)
        assert len(await store.children("/kafka-acl-extended-changes")) == 1
        for s in (w, r):
            await s.close()
        for st in {id(store): store, id(other_store): other_store}.values():
            await st.close()

    run(scenario)
