"""One contract for every MetadataStore: the embedded store and ZooKeeper (through kazoo) alike.

Each test gets a ``backend`` that opens sessions on one namespace of its own (embedded: a data
directory; ZooKeeper: a chroot of a module-scoped ZooKeeperProcess from Debian's package).
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.metadata.embedded import EmbeddedStore
from strom.metadata.store import (
    BadVersionError,
    CheckOp,
    CreateOp,
    DeleteOp,
    EventType,
    MetadataStore,
    MultiError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    SessionState,
    SetOp,
    WatchEvent,
)
from strom.metadata.zookeeper import ZooKeeperStore
from strom.testing.zookeeper import ZooKeeperProcess, zookeeper_available

SESSION_MS = 2000
needs_zk = pytest.mark.skipif(not zookeeper_available(), reason="apt-get install -y zookeeper")


class Backend:
    def __init__(self, name: str, make: Callable[[], MetadataStore], concurrent: bool) -> None:
        self.name = name
        self.make = make
        self.concurrent = concurrent  # can two sessions be open at once
        self.opened: list[MetadataStore] = []

    async def open(self) -> MetadataStore:
        store = self.make()
        await store.start()
        self.opened.append(store)
        return store


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperProcess]:
    zk = ZooKeeperProcess(tmp_path_factory.mktemp("zk"))
    zk.start()
    try:
        yield zk
    finally:
        zk.stop()


@pytest.fixture(params=["embedded", pytest.param("zookeeper", marks=needs_zk)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "embedded":
        return Backend("embedded", lambda: EmbeddedStore(tmp_path), concurrent=False)
    zk: ZooKeeperProcess = request.getfixturevalue("zookeeper")
    connect = f"{zk.connect_string}/contract-{uuid.uuid4().hex[:8]}"
    return Backend("zookeeper", lambda: ZooKeeperStore(connect, session_timeout_ms=SESSION_MS,
                                                        connection_timeout_ms=10_000),
                   concurrent=True)  # fmt: skip


def run(backend: Backend, scenario: Callable[[MetadataStore], Awaitable[None]]) -> None:
    async def main() -> None:
        store = await backend.open()
        try:
            await asyncio.wait_for(scenario(store), 60)
        finally:
            for s in backend.opened:
                await s.close()

    asyncio.run(main())


class Recorder:
    """A watch callback that records its events and the thread it ran on."""

    def __init__(self) -> None:
        self.events: list[WatchEvent] = []
        self.threads: set[int] = set()
        self._changed = asyncio.Event()
        self._seen = 0

    def __call__(self, event: WatchEvent) -> None:
        self.events.append(event)
        self.threads.add(threading.get_ident())
        self._changed.set()

    async def next(self, timeout: float = 10) -> WatchEvent:
        """The first event not returned yet (waiting for it up to ``timeout``)."""
        deadline = time.monotonic() + timeout
        while len(self.events) == self._seen:
            self._changed.clear()
            await asyncio.wait_for(self._changed.wait(), max(0.01, deadline - time.monotonic()))
        self._seen += 1
        return self.events[self._seen - 1]


async def settle() -> None:
    """Long enough for a watch that should not fire to have fired (ZooKeeper round trips)."""
    await asyncio.sleep(0.3)


def test_create_get_set_delete(backend: Backend) -> None:
    async def scenario(s: MetadataStore) -> None:
        stat = await s.create("/a/b", b"one")
        assert stat.version == 0 and stat.ephemeral_owner == 0
        assert await s.children("/a") == ["b"]
        data, got = await s.get("/a/b")
        assert data == b"one" and got == stat
        after = await s.set("/a/b", b"two")
        assert after.version == 1 and after.created == stat.created
        assert (await s.get("/a/b"))[0] == b"two"
        exists = await s.exists("/a/b")
        assert exists is not None and exists.version == 1
        await s.delete("/a/b")
        assert await s.exists("/a/b") is None
        assert await s.children("/a") == []

    run(backend, scenario)


def test_errors(backend: Backend) -> None:
    async def scenario(s: MetadataStore) -> None:
        await s.create("/x", b"")
        with pytest.raises(NodeExistsError):
            await s.create("/x", b"again")
        with pytest.raises(NoNodeError):
            await s.create("/no/parent", make_parents=False)
        for call in (s.get("/none"), s.set("/none", b""), s.delete("/none"), s.children("/none")):
            with pytest.raises(NoNodeError):
                await call
        await s.create("/x/child")
        with pytest.raises(NotEmptyError):
            await s.delete("/x")
        await s.create("/x/child/deeper")
        await s.delete("/x", recursive=True)
        assert await s.exists("/x") is None

    run(backend, scenario)


def test_versions_and_bad_version(backend: Backend) -> None:
    async def scenario(s: MetadataStore) -> None:
        await s.create("/v", b"0")
        assert (await s.set("/v", b"1", version=0)).version == 1
        with pytest.raises(BadVersionError):
            await s.set("/v", b"stale", version=0)
        assert (await s.get("/v"))[0] == b"1"
        with pytest.raises(BadVersionError):
            await s.delete("/v", version=0)
        await s.delete("/v", version=1)
        assert await s.exists("/v") is None

    run(backend, scenario)


def test_children_sorted_and_children_version(backend: Backend) -> None:
    async def scenario(s: MetadataStore) -> None:
        await s.create("/p")
        for name in ("c", "a", "b"):
            await s.create(f"/p/{name}")
        await s.delete("/p/b")
        assert await s.children("/p") == ["a", "c"]
        stat = await s.exists("/p")
        assert stat is not None and stat.children_version == 4 and stat.version == 0

    run(backend, scenario)


def test_sequential_nodes_are_numbered_in_order(backend: Backend) -> None:
    async def scenario(s: MetadataStore) -> None:
        first = await s.create_sequential("/seq/changes/change_", b"one")  # parents made
        assert first == "/seq/changes/change_0000000000"
        await s.create("/seq/changes/other")
        await s.delete("/seq/changes/other")
        second = await s.create_sequential("/seq/changes/change_", b"two")
        # the embedded store counts the delete as a child change, Debian's ZooKeeper does not
        assert second in ("/seq/changes/change_0000000002", "/seq/changes/change_0000000003")
        await s.delete(second)
        third = await s.create_sequential("/seq/changes/change_", b"three")
        assert third > second  # never given again, even once deleted
        assert await s.children("/seq/changes") == ["change_0000000000", third.rsplit("/", 1)[1]]
        assert (await s.get(third))[0] == b"three"

    run(backend, scenario)


def test_created_is_monotonic_and_higher_for_a_recreated_node(backend: Backend) -> None:
    async def scenario(s: MetadataStore) -> None:
        a = await s.create("/m/a")
        b = await s.create("/m/b")
        assert b.created > a.created
        await s.set("/m/a", b"x")
        await s.delete("/m/a")
        again = await s.create("/m/a")
        assert again.created > b.created

    run(backend, scenario)


def test_multi_is_all_or_nothing(backend: Backend) -> None:
    async def scenario(s: MetadataStore) -> None:
        await s.create("/t", b"0")
        await s.create("/gone")
        with pytest.raises(MultiError) as info:
            await s.multi([CreateOp("/t/new", b"n"), SetOp("/t", b"1"), DeleteOp("/gone"),
                           SetOp("/t", b"2", version=0)])  # fmt: skip
        assert info.value.index == 3 and isinstance(info.value.cause, BadVersionError)
        assert await s.exists("/t/new") is None
        assert await s.get("/t") == (b"0", (await s.get("/t"))[1])
        assert (await s.get("/t"))[1].version == 0 and await s.exists("/gone") is not None
        with pytest.raises(MultiError) as info:
            await s.multi([CreateOp("/t/a"), CreateOp("/missing/b")])
        assert info.value.index == 1 and isinstance(info.value.cause, NoNodeError)
        assert await s.exists("/t/a") is None
        stats = await s.multi([CreateOp("/t/new", b"n"), SetOp("/t", b"1", version=0),
                               DeleteOp("/gone"), CheckOp("/t", 1)])  # fmt: skip
        assert stats[0] is not None and stats[0].version == 0
        assert stats[1] is not None and stats[1].version == 1 and stats[2:] == [None, None]
        assert (await s.get("/t/new"))[0] == b"n" and await s.exists("/gone") is None

    run(backend, scenario)


def test_check_op_fences_a_stale_controller(backend: Backend) -> None:
    async def scenario(s: MetadataStore) -> None:
        epoch = await s.create("/controller_epoch", b"1")
        await s.create("/state", b"leader=1")
        await s.set("/controller_epoch", b"2", version=epoch.version)  # a new controller
        with pytest.raises(MultiError) as info:
            await s.multi([CheckOp("/controller_epoch", epoch.version),
                           SetOp("/state", b"leader=2", version=0)])  # fmt: skip
        assert info.value.index == 0 and isinstance(info.value.cause, BadVersionError)
        assert (await s.get("/state"))[0] == b"leader=1"
        await s.multi([CheckOp("/controller_epoch", epoch.version + 1),
                       SetOp("/state", b"leader=3", version=0)])  # fmt: skip
        assert (await s.get("/state"))[0] == b"leader=3"

    run(backend, scenario)


def test_watches_fire_once_on_the_loop(backend: Backend) -> None:
    async def scenario(s: MetadataStore) -> None:
        loop_thread = threading.get_ident()
        await s.create("/w", b"0")
        data = Recorder()
        await s.get("/w", watch=data)
        await s.set("/w", b"1")
        assert await data.next() == WatchEvent(EventType.CHANGED, "/w")
        await s.set("/w", b"2")  # one-shot: not armed again
        await settle()
        assert len(data.events) == 1

        created = Recorder()
        assert await s.exists("/w/kid", watch=created) is None
        kids = Recorder()
        assert await s.children("/w", watch=kids) == []
        await s.create("/w/kid")
        assert await created.next() == WatchEvent(EventType.CREATED, "/w/kid")
        assert await kids.next() == WatchEvent(EventType.CHILD, "/w")

        absent = Recorder()
        with pytest.raises(NoNodeError):
            await s.get("/later", watch=absent)
        await s.create("/later")
        assert await absent.next() == WatchEvent(EventType.CREATED, "/later")

        deleted, gone_kids = Recorder(), Recorder()
        await s.get("/w/kid", watch=deleted)
        await s.children("/w", watch=gone_kids)
        await s.delete("/w/kid")
        assert await deleted.next() == WatchEvent(EventType.DELETED, "/w/kid")
        assert await gone_kids.next() == WatchEvent(EventType.CHILD, "/w")
        for rec in (data, created, kids, absent, deleted, gone_kids):
            assert rec.threads == {loop_thread}

    run(backend, scenario)


def test_ephemerals_vanish_with_their_session(backend: Backend) -> None:
    async def scenario(s: MetadataStore) -> None:
        stat = await s.create("/brokers/ids/1", b"me", ephemeral=True)
        assert stat.ephemeral_owner == s.session_id != 0
        other = None
        gone = Recorder()
        if backend.concurrent:
            other = await backend.open()
            assert (await other.get("/brokers/ids/1", watch=gone))[0] == b"me"
        await s.close()
        backend.opened.remove(s)
        if other is None:
            other = await backend.open()
        else:
            assert await gone.next() == WatchEvent(EventType.DELETED, "/brokers/ids/1")
        assert await other.exists("/brokers/ids/1") is None
        assert await other.children("/brokers/ids") == []
        again = await other.create("/brokers/ids/1", b"me", ephemeral=True)
        assert again.created > stat.created and again.ephemeral_owner == other.session_id

    run(backend, scenario)


# --- ZooKeeper sessions ------------------------------------------------------------------------


@needs_zk
def test_chroot_is_created_and_isolates(zookeeper: ZooKeeperProcess) -> None:
    async def main() -> None:
        a = ZooKeeperStore(f"{zookeeper.connect_string}/iso/a", session_timeout_ms=SESSION_MS)
        b = ZooKeeperStore(f"{zookeeper.connect_string}/iso/b", session_timeout_ms=SESSION_MS)
        root = ZooKeeperStore(zookeeper.connect_string, session_timeout_ms=SESSION_MS)
        for s in (a, b, root):
            await s.start()
        try:
            await a.create("/brokers/ids/1", b"a")
            assert await b.exists("/brokers/ids/1") is None
            assert (await root.get("/iso/a/brokers/ids/1"))[0] == b"a"
            assert "a" in await root.children("/iso")
        finally:
            for s in (a, b, root):
                await s.close()

    asyncio.run(main())


@needs_zk
def test_source_host_is_where_the_session_connection_leaves_from(zookeeper: ZooKeeperProcess) -> None:
    """A broker's session leaves from its own listener address, so a network-fault test can
    cut it from ZooKeeper by address (loopback connections otherwise leave from 127.0.0.1)."""

    async def main() -> None:
        store = ZooKeeperStore(zookeeper.connect_string, session_timeout_ms=SESSION_MS,
                               source_host="127.0.0.3")  # fmt: skip
        await store.start()
        try:
            await store.create(f"/src-{uuid.uuid4().hex[:8]}", b"x")  # the session works
            sock = store._client._connection._socket  # kazoo's connection to the server
            assert sock.getsockname()[0] == "127.0.0.3"
        finally:
            await store.close()

    asyncio.run(main())


async def _wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def _lose_and_regain(zk: ZooKeeperProcess) -> None:
    connect = f"{zk.connect_string}/session-{uuid.uuid4().hex[:8]}"
    store = ZooKeeperStore(connect, session_timeout_ms=SESSION_MS, connection_timeout_ms=10_000)
    observer = ZooKeeperStore(connect, session_timeout_ms=20_000)
    await store.start()
    await observer.start()
    states: list[SessionState] = []
    store.add_session_listener(states.append)
    try:
        first = store.session_id
        await store.create("/brokers/ids/1", b"x", ephemeral=True)
        await store.create("/watched", b"0")
        stale = Recorder()
        await store.get("/watched", watch=stale)
        # Not by pausing ZooKeeper itself: its session clock stops with it, and a client that
        # reconnects at once after SIGCONT may find its session revived (a flaky test under load).
        await store.expire_session_for_tests()  # type: ignore[attr-defined]
        await _wait_for(lambda: SessionState.LOST in states, 30, "LOST")
        await _wait_for(lambda: states[-1] is SessionState.CONNECTED, 30, "a new session")
        assert store.session_id not in (0, first)
        assert await observer.exists("/brokers/ids/1") is None  # the old session's ephemeral
        await observer.set("/watched", b"1")
        await settle()
        assert stale.events == []  # a watch of the lost session never fires
        again = await store.create("/brokers/ids/1", b"x", ephemeral=True)
        assert again.ephemeral_owner == store.session_id
    finally:
        await store.close()
        await observer.close()


@needs_zk
def test_session_expiry_is_lost_then_a_new_session(zookeeper: ZooKeeperProcess) -> None:
    asyncio.run(asyncio.wait_for(_lose_and_regain(zookeeper), 90))


@needs_zk
def test_a_watch_survives_a_short_disconnection(zookeeper: ZooKeeperProcess) -> None:
    """kazoo drops watches with the connection; the store re-fires them once reconnected."""

    async def main() -> None:
        connect = f"{zookeeper.connect_string}/flap-{uuid.uuid4().hex[:8]}"
        store = ZooKeeperStore(connect, session_timeout_ms=15_000)
        await store.start()
        states: list[SessionState] = []
        store.add_session_listener(states.append)
        try:
            await store.create("/n", b"0")
            rec = Recorder()
            await store.get("/n", watch=rec)
            session = store.session_id
            zookeeper.pause()
            try:
                await _wait_for(lambda: SessionState.SUSPENDED in states, 20, "SUSPENDED")
            finally:
                zookeeper.resume()
            await _wait_for(lambda: states[-1] is SessionState.CONNECTED, 20, "reconnected")
            assert store.session_id == session and SessionState.LOST not in states
            event: Any = await rec.next()
            assert event.path == "/n"
        finally:
            await store.close()

    asyncio.run(asyncio.wait_for(main(), 90))
