"""The ZooKeeper metadata store (cluster mode), through kazoo.

``ZooKeeperStore("host:port[,host:port…][/chroot]")`` keeps one ZooKeeper session. Every path of
the :class:`~strom.metadata.store.MetadataStore` interface is under the chroot (created at start
if absent, as Kafka does); the store adds the prefix itself, with one session for everything.

Threads: kazoo runs its connection and callbacks on its own threads. Every call uses kazoo's
``*_async`` form, whose completion is handed to the event loop with ``call_soon_threadsafe``: the
loop never waits on the network. Watch and session-state callbacks arrive on kazoo's threads and
are handed over the same way, so callers only ever run on the loop.

Sessions: ``zookeeper.session.timeout.ms`` (Kafka's default 18 000) is asked of the server;
``zookeeper.connection.timeout.ms`` bounds :meth:`ZooKeeperStore.start` (Kafka: the session
timeout when unset). kazoo reconnects by itself: within the session (SUSPENDED -> CONNECTED), or
with a new session after the old one expired (LOST -> CONNECTED, new :attr:`session_id`; the
owner must then re-create its ephemeral nodes and re-read what it watched).

Watches: one-shot, as ZooKeeper's. kazoo drops every pending watch when the *connection* drops
(it calls them with an empty event); this store keeps those and fires them once the connection
is back in the same session (``CHANGED`` for a data watch, ``CHILD`` for a child watch), so the
owner re-reads: a watch may fire without a change, never miss one while the session lives. After
LOST, watches set in the old session never fire. ``get`` with a watch on an absent node sets an
``exists`` watch (ZooKeeper sets none on a failed getData) firing at the node's creation.

Source address: ``source_host`` (the broker's own listener host) makes the session's TCP
connection leave from that address, as the brokers' connections to each other do, so a
network-partition test can cut one broker from ZooKeeper with a rule on addresses (on loopback
every connection otherwise comes from 127.0.0.1). A loopback source is used only towards a
loopback server (it could not reach another host).

Errors: kazoo's map to the store's (NoNode, NodeExists, BadVersion, NotEmpty); ConnectionLoss,
SessionExpired and a closed client to :class:`SessionLostError` (a write's outcome is then
unknown: re-read). ``multi`` is a kazoo transaction: the first failing op becomes
``MultiError(index, cause)``; the Stat of a created node is read just after the commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
from collections.abc import Callable, Sequence
from typing import Any

from kazoo import exceptions as kx
from kazoo.client import KazooClient
from kazoo.handlers import utils as kazoo_utils
from kazoo.handlers.threading import SequentialThreadingHandler
from kazoo.protocol.states import EventType as KzEvent
from kazoo.protocol.states import KazooState, KeeperState, WatchedEvent, ZnodeStat

from strom.metadata.store import (
    BadVersionError,
    CheckOp,
    CreateOp,
    DeleteOp,
    EventType,
    MultiError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    Op,
    SessionListener,
    SessionLostError,
    SessionState,
    SetOp,
    Stat,
    StoreError,
    WatchCallback,
    WatchEvent,
)

log = logging.getLogger(__name__)
DEFAULT_SESSION_TIMEOUT_MS = 18_000
_EVENTS = {KzEvent.CREATED: EventType.CREATED, KzEvent.DELETED: EventType.DELETED,
           KzEvent.CHANGED: EventType.CHANGED, KzEvent.CHILD: EventType.CHILD}  # fmt: skip
_STATES = {KazooState.CONNECTED: SessionState.CONNECTED,
           KazooState.SUSPENDED: SessionState.SUSPENDED, KazooState.LOST: SessionState.LOST}  # fmt: skip
_ERRORS: tuple[tuple[type[Exception], type[StoreError]], ...] = (
    (kx.NoNodeError, NoNodeError),
    (kx.NodeExistsError, NodeExistsError),
    (kx.BadVersionError, BadVersionError),
    (kx.NotEmptyError, NotEmptyError),
    (kx.ConnectionLoss, SessionLostError),
    (kx.SessionExpiredError, SessionLostError),  # ConnectionClosedError too
    (kx.OperationTimeoutError, SessionLostError),
)


def split_connect(connect: str) -> tuple[str, str]:
    """``"h1:2181,h2:2181/kafka"`` -> ``("h1:2181,h2:2181", "/kafka")``; chroot ``""`` if none."""
    hosts, slash, chroot = connect.partition("/")
    chroot = (slash + chroot).rstrip("/")
    if not hosts or "//" in chroot:
        raise ValueError(f"invalid zookeeper.connect {connect!r}")
    return hosts, chroot


def _map_error(exc: BaseException) -> BaseException:
    for kazoo_type, ours in _ERRORS:
        if isinstance(exc, kazoo_type):
            return ours(str(exc) or type(exc).__name__)
    if isinstance(exc, kx.KazooException):
        return StoreError(f"{type(exc).__name__}: {exc}")
    return exc


def _stat(zs: ZnodeStat) -> Stat:
    return Stat(zs.version, zs.czxid, zs.ephemeralOwner, zs.cversion)


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


class _BoundSocketModule:
    """The ``socket`` module as kazoo's connection code uses it, with connections leaving from
    ``source_host`` (only a loopback server is reached from a loopback source)."""

    def __init__(self, source_host: str) -> None:
        self.source_host = source_host

    def __getattr__(self, name: str) -> Any:
        return getattr(socket, name)

    def create_connection(self, address: tuple[str, int], timeout: float | None = None) -> socket.socket:
        source, server = self.source_host, str(address[0])
        if (_loopback(source) and not _loopback(server)) or (":" in source) != (":" in server):
            return socket.create_connection(address, timeout)
        return socket.create_connection(address, timeout, source_address=(source, 0))


class _BoundHandler(SequentialThreadingHandler):  # type: ignore[misc]
    """kazoo's threading handler whose connections leave from one source address."""

    def __init__(self, source_host: str) -> None:
        super().__init__()
        self._module = _BoundSocketModule(source_host)

    def create_connection(self, *args: Any, **kwargs: Any) -> socket.socket:
        return kazoo_utils.create_tcp_connection(self._module, *args, **kwargs)  # type: ignore[no-any-return]


class ZooKeeperStore:
    """:class:`~strom.metadata.store.MetadataStore` on a ZooKeeper ensemble (module doc)."""

    def __init__(
        self,
        connect: str,
        *,
        session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
        connection_timeout_ms: int | None = None,
        source_host: str | None = None,
    ) -> None:
        self.hosts, self.chroot = split_connect(connect)
        self.session_timeout_ms = session_timeout_ms
        self.connection_timeout_ms = connection_timeout_ms or session_timeout_ms
        handler = _BoundHandler(source_host) if source_host else None
        self._client = KazooClient(hosts=self.hosts, timeout=session_timeout_ms / 1000.0,
                                   handler=handler)  # fmt: skip
        self._loop: asyncio.AbstractEventLoop | None = None
        self._listeners: list[SessionListener] = []
        self._state = SessionState.LOST
        self._generation = 0  # + 1 at every LOST: watches of older sessions never fire
        self._dropped: list[Callable[[], None]] = []  # watches kazoo dropped while suspended
        self._client.add_listener(self._on_kazoo_state)

    # --- plumbing --------------------------------------------------------------------------

    def _path(self, path: str) -> str:
        if not path.startswith("/"):
            raise ValueError(f"invalid metadata path {path!r}")
        return (self.chroot + path).rstrip("/") or "/" if self.chroot else path

    def _to_loop(self, fn: Callable[..., None], *args: Any) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(fn, *args)

    async def _wait(self, async_result: Any) -> Any:
        """Await a kazoo IAsyncResult without blocking the loop."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()

        def settle(value: Any, exc: BaseException | None) -> None:
            if fut.done():
                return
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(value)

        def done(result: Any) -> None:  # on kazoo's completion thread
            try:
                value = result.get_nowait()
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine
                self._to_loop(settle, None, _map_error(exc))
            else:
                self._to_loop(settle, value, None)

        async_result.rawlink(done)
        return await fut

    def _watcher(self, path: str, callback: WatchCallback, kind: str) -> Callable[[Any], None]:
        """A kazoo watch function for ``callback`` (fires at most once, on the loop)."""
        generation = self._generation
        fired = False

        def fire(event: WatchEvent) -> None:  # on the loop
            nonlocal fired
            if fired or generation != self._generation:
                return
            fired = True
            callback(event)

        def replay() -> None:  # on the loop: the connection came back in the same session
            fire(WatchEvent(EventType.CHILD if kind == "child" else EventType.CHANGED, path))

        def dropped() -> None:  # on the loop
            if generation != self._generation:
                return
            if self._state is SessionState.CONNECTED:
                replay()
            else:
                self._dropped.append(replay)

        def on_event(event: WatchedEvent) -> None:  # on kazoo's thread
            if event.type == KzEvent.NONE:
                if event.state == KeeperState.CONNECTING:
                    self._to_loop(dropped)
                return
            self._to_loop(fire, WatchEvent(_EVENTS.get(event.type, EventType.CHANGED), path))

        on_event.fire = fire  # type: ignore[attr-defined]
        return on_event

    def _on_kazoo_state(self, state: str) -> None:  # on kazoo's connection thread: no blocking
        self._to_loop(self._on_state, _STATES[state])

    def _on_state(self, state: SessionState) -> None:  # on the loop
        if state is self._state:
            return
        self._state = state
        log.info("zookeeper session %#x is %s", self.session_id, state.value)
        if state is SessionState.LOST:
            self._generation += 1
            self._dropped.clear()
        elif state is SessionState.CONNECTED:
            replays, self._dropped = self._dropped, []
            for replay in replays:
                replay()
        for listener in list(self._listeners):
            listener(state)

    # --- the MetadataStore interface -------------------------------------------------------

    @property
    def session_id(self) -> int:
        client_id = self._client.client_id
        return int(client_id[0]) if client_id else 0

    @property
    def state(self) -> SessionState:
        return self._state

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        timeout = self.connection_timeout_ms / 1000.0
        try:
            await asyncio.to_thread(self._client.start, timeout)
        except Exception as exc:
            await asyncio.to_thread(self._client.close)
            raise SessionLostError(
                f"could not connect to ZooKeeper at {self.hosts} within {timeout:g}s: {exc}"
            ) from None
        self._state = SessionState.CONNECTED
        if self.chroot:
            await self._wait(self._client.ensure_path_async(self.chroot))
        log.info("zookeeper session %#x on %s%s (timeout %d ms)", self.session_id, self.hosts,
                 self.chroot, self.session_timeout_ms)  # fmt: skip

    async def create(
        self, path: str, data: bytes = b"", *, ephemeral: bool = False, make_parents: bool = True
    ) -> Stat:
        result = await self._wait(self._client.create_async(
            self._path(path), bytes(data), ephemeral=ephemeral, makepath=make_parents,
            include_data=True))  # fmt: skip
        return _stat(result[1])

    async def create_sequential(self, prefix: str, data: bytes = b"") -> str:
        created = await self._wait(self._client.create_async(
            self._path(prefix), bytes(data), sequence=True, makepath=True))  # fmt: skip
        # kazoo answers the path without its own chroot; strom's chroot is in the path itself
        return created[len(self.chroot):] if self.chroot else created

    async def get(self, path: str, watch: WatchCallback | None = None) -> tuple[bytes, Stat]:
        full = self._path(path)
        watcher = self._watcher(path, watch, "data") if watch else None
        try:
            data, zs = await self._wait(self._client.get_async(full, watch=watcher))
        except NoNodeError:
            # ZooKeeper sets no watch on a failed getData: an exists watch does
            exists = self._client.exists_async
            if watcher is not None and await self._wait(exists(full, watch=watcher)) is not None:
                watcher.fire(WatchEvent(EventType.CREATED, path))  # type: ignore[attr-defined]
            raise
        return data, _stat(zs)

    async def exists(self, path: str, watch: WatchCallback | None = None) -> Stat | None:
        watcher = self._watcher(path, watch, "data") if watch else None
        zs = await self._wait(self._client.exists_async(self._path(path), watch=watcher))
        return None if zs is None else _stat(zs)

    async def set(self, path: str, data: bytes, version: int = -1) -> Stat:
        zs = await self._wait(self._client.set_async(self._path(path), bytes(data), version))
        return _stat(zs)

    async def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None:
        if recursive:
            for child in await self.children(path):
                await self.delete(f"{path.rstrip('/')}/{child}", recursive=True)
        await self._wait(self._client.delete_async(self._path(path), version))

    async def children(self, path: str, watch: WatchCallback | None = None) -> list[str]:
        watcher = self._watcher(path, watch, "child") if watch else None
        names = await self._wait(self._client.get_children_async(self._path(path), watch=watcher))
        return sorted(names)

    async def multi(self, ops: Sequence[Op]) -> list[Stat | None]:
        txn = self._client.transaction()
        for op in ops:
            full = self._path(op.path)
            if isinstance(op, CreateOp):
                txn.create(full, bytes(op.data), ephemeral=op.ephemeral)
            elif isinstance(op, SetOp):
                txn.set_data(full, bytes(op.data), op.version)
            elif isinstance(op, DeleteOp):
                txn.delete(full, op.version)
            elif isinstance(op, CheckOp):
                txn.check(full, op.version)
        results = await self._wait(txn.commit_async())
        failed = [(i, r) for i, r in enumerate(results) if isinstance(r, Exception)]
        if failed:
            first = next(((i, r) for i, r in failed if not isinstance(
                r, (kx.RolledBackError, kx.RuntimeInconsistency))), failed[0])  # fmt: skip
            cause = _map_error(first[1])
            if not isinstance(cause, StoreError):
                cause = StoreError(str(cause))
            raise MultiError(first[0], cause)
        out: list[Stat | None] = []
        for op, result in zip(ops, results, strict=True):
            if isinstance(op, SetOp):
                out.append(_stat(result))
            elif isinstance(op, CreateOp):
                out.append(await self.exists(op.path))
            else:
                out.append(None)
        return out

    def add_session_listener(self, listener: SessionListener) -> None:
        self._listeners.append(listener)

    async def close(self) -> None:
        """End the session (ZooKeeper deletes its ephemeral nodes at once) and stop kazoo."""
        self._generation += 1
        self._listeners.clear()
        client = self._client
        try:
            await asyncio.to_thread(client.stop)
        finally:
            await asyncio.to_thread(client.close)
            self._state = SessionState.LOST

    async def expire_session_for_tests(self) -> None:
        """Make ZooKeeper expire this session (a second connection with its id and password
        closes it), as a network partition longer than the session timeout would."""
        session_id, password = self._client.client_id

        def expire() -> None:
            other = KazooClient(hosts=self.hosts, client_id=(session_id, password),
                                timeout=self.session_timeout_ms / 1000.0)  # fmt: skip
            other.start(self.connection_timeout_ms / 1000.0)
            other.stop()
            other.close()

        await asyncio.to_thread(expire)
