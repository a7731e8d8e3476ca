"""An in-memory :class:`MetadataStore` with several sessions on one tree, for controller tests.

The embedded store has one session (one process); the controller's tests need several brokers
racing for ``/controller`` and sessions that expire, so this fake keeps one shared
:class:`Tree` and hands out :class:`Session` objects that follow the contract of
``strom.metadata.store`` (versions, ``created`` counter, ephemeral nodes, one-shot watches
delivered with ``call_soon``, atomic multi). ``Tree.expire(session)`` plays ZooKeeper's
session expiry: its ephemeral nodes vanish and its listeners get SUSPENDED, then LOST.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

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


@dataclass
class _Node:
    data: bytes
    version: int
    created: int
    owner: int
    cversion: int = 0

    def stat(self) -> Stat:
        return Stat(self.version, self.created, self.owner, self.cversion)


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0] or "/"


class Tree:
    def __init__(self) -> None:
        self.nodes: dict[str, _Node] = {"/": _Node(b"", 0, 0, 0)}
        self._zxid = itertools.count(1)
        self._session_ids = itertools.count(0x100)
        self._data_watches: dict[str, list[tuple[Session, WatchCallback]]] = {}
        self._child_watches: dict[str, list[tuple[Session, WatchCallback]]] = {}
        self.sessions: list[Session] = []

    def session(self) -> Session:
        s = Session(self, next(self._session_ids))
        self.sessions.append(s)
        return s

    # the operations, applied to a copy first by multi --------------------------------------
    def _apply(self, nodes: dict[str, _Node], op: Op, owner: int, events: list[WatchEvent]) -> Stat | None:
        if isinstance(op, CreateOp):
            if op.path in nodes:
                raise NodeExistsError(op.path)
            parent = nodes.get(_parent(op.path))
            if parent is None:
                raise NoNodeError(_parent(op.path))
            node = _Node(op.data, 0, next(self._zxid), owner if op.ephemeral else 0)
            nodes[op.path] = node
            parent.cversion += 1
            events += [WatchEvent(EventType.CREATED, op.path), WatchEvent(EventType.CHILD, _parent(op.path))]
            return node.stat()
        found = nodes.get(op.path)
        if found is None:
            raise NoNodeError(op.path)
        if op.version >= 0 and found.version != op.version:
            raise BadVersionError(op.path)
        if isinstance(op, SetOp):
            found.data = op.data
            found.version += 1
            events.append(WatchEvent(EventType.CHANGED, op.path))
            return found.stat()
        if isinstance(op, DeleteOp):
            if any(_parent(p) == op.path for p in nodes if p != "/"):
                raise NotEmptyError(op.path)
            del nodes[op.path]
            nodes[_parent(op.path)].cversion += 1
            events += [WatchEvent(EventType.DELETED, op.path), WatchEvent(EventType.CHILD, _parent(op.path))]
        return None

    def run(self, ops: Sequence[Op], owner: int) -> list[Stat | None]:
        copy = {p: _Node(n.data, n.version, n.created, n.owner, n.cversion) for p, n in self.nodes.items()}
        events: list[WatchEvent] = []
        results = []
        for i, op in enumerate(ops):
            try:
                results.append(self._apply(copy, op, owner, events))
            except StoreError as exc:
                if len(ops) == 1:
                    raise
                raise MultiError(i, exc) from None
        self.nodes = copy
        self._fire(events)
        return results

    def _fire(self, events: list[WatchEvent]) -> None:
        for event in events:
            table = self._child_watches if event.type is EventType.CHILD else self._data_watches
            if event.type is EventType.DELETED:  # a deleted node's children watch fires too
                self._fire_table(self._child_watches, event)
            self._fire_table(table, event)

    @staticmethod
    def _fire_table(table: dict[str, list[tuple[Session, WatchCallback]]], event: WatchEvent) -> None:
        for session, callback in table.pop(event.path, []):
            if session.state is not SessionState.LOST:
                asyncio.get_running_loop().call_soon(callback, event)

    def watch(self, session: Session, path: str, callback: WatchCallback, children: bool) -> None:
        table = self._child_watches if children else self._data_watches
        table.setdefault(path, []).append((session, callback))

    def drop_watches(self, session: Session) -> None:
        """Forget ``session``'s watches (its process will not hear of what happens next)."""
        for table in (self._data_watches, self._child_watches):
            for path in list(table):
                table[path] = [(s, cb) for s, cb in table[path] if s is not session]

    def expire(self, session: Session) -> None:
        """ZooKeeper expires ``session``: ephemerals gone, watches dead, listeners told."""
        session.notify(SessionState.SUSPENDED)
        session.state = SessionState.LOST
        self.drop_watches(session)
        doomed = [p for p, n in self.nodes.items() if n.owner == session.session_id]
        self.run([DeleteOp(p) for p in doomed], 0) if doomed else None
        session.notify(SessionState.LOST)


class Session:
    def __init__(self, tree: Tree, session_id: int) -> None:
        self.tree = tree
        self._id = session_id
        self.state = SessionState.CONNECTED
        self._listeners: list[SessionListener] = []

    @property
    def session_id(self) -> int:
        return self._id

    def notify(self, state: SessionState) -> None:
        for listener in list(self._listeners):
            asyncio.get_running_loop().call_soon(listener, state)

    def _live(self) -> None:
        if self.state is not SessionState.CONNECTED:
            raise SessionLostError(f"session {self._id:#x} is {self.state.value}")

    async def start(self) -> None:
        return None

    async def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False,
                     make_parents: bool = True) -> Stat:  # fmt: skip
        self._live()
        if make_parents:
            parts = path.strip("/").split("/")[:-1]
            for i in range(len(parts)):
                p = "/" + "/".join(parts[: i + 1])
                if p not in self.tree.nodes:
                    self.tree.run([CreateOp(p)], 0)
        stat = self.tree.run([CreateOp(path, data, ephemeral)], self._id)[0]
        assert stat is not None
        await asyncio.sleep(0)
        return stat

    async def create_sequential(self, prefix: str, data: bytes = b"") -> str:
        self._live()
        parts = prefix.strip("/").split("/")[:-1]
        for i in range(len(parts)):
            p = "/" + "/".join(parts[: i + 1])
            if p not in self.tree.nodes:
                self.tree.run([CreateOp(p)], 0)
        path = f"{prefix}{self.tree.nodes[_parent(prefix)].cversion:010d}"
        self.tree.run([CreateOp(path, data)], self._id)
        await asyncio.sleep(0)
        return path

    async def get(self, path: str, watch: WatchCallback | None = None) -> tuple[bytes, Stat]:
        self._live()
        if watch is not None:
            self.tree.watch(self, path, watch, children=False)
        node = self.tree.nodes.get(path)
        if node is None:
            raise NoNodeError(path)
        return node.data, node.stat()

    async def exists(self, path: str, watch: WatchCallback | None = None) -> Stat | None:
        self._live()
        if watch is not None:
            self.tree.watch(self, path, watch, children=False)
        node = self.tree.nodes.get(path)
        return None if node is None else node.stat()

    async def set(self, path: str, data: bytes, version: int = -1) -> Stat:
        self._live()
        stat = self.tree.run([SetOp(path, data, version)], self._id)[0]
        assert stat is not None
        await asyncio.sleep(0)
        return stat

    async def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None:
        self._live()
        if recursive:
            below = sorted((p for p in self.tree.nodes if p.startswith(path + "/")),
                           key=len, reverse=True)  # fmt: skip
            for p in below:
                self.tree.run([DeleteOp(p)], self._id)
        self.tree.run([DeleteOp(path, version)], self._id)
        await asyncio.sleep(0)

    async def children(self, path: str, watch: WatchCallback | None = None) -> list[str]:
        self._live()
        if path not in self.tree.nodes:
            raise NoNodeError(path)
        if watch is not None:
            self.tree.watch(self, path, watch, children=True)
        prefix = path.rstrip("/") + "/"
        return sorted(p[len(prefix):] for p in self.tree.nodes
                      if p.startswith(prefix) and "/" not in p[len(prefix):])  # fmt: skip

    async def multi(self, ops: Sequence[Op]) -> list[Stat | None]:
        self._live()
        try:
            result = self.tree.run(list(ops), self._id)
        except MultiError:
            raise
        except StoreError as exc:
            raise MultiError(0, exc) from None
        await asyncio.sleep(0)
        return result

    def add_session_listener(self, listener: SessionListener) -> None:
        self._listeners.append(listener)

    async def close(self) -> None:
        if self.state is not SessionState.LOST:
            self.tree.expire(self)


__all__ = ["CheckOp", "Session", "Tree"]
