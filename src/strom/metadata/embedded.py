"""The embedded metadata store: the single-node default, an in-process tree of znodes.

It implements :class:`~strom.metadata.store.MetadataStore` for one process: one session (its id
random, always CONNECTED: a session listener is never called), ephemeral nodes that live as long
as the store is open (a restart, or a kill -9, ends them: they are never written), one-shot data
and child watches set atomically with the read and called on the reader's event loop with
``loop.call_soon``, and ``multi`` that validates every operation before applying any.

Changes apply in memory at once, on the caller's thread (the event loop), and queue one journal
line each for the writer thread of :mod:`strom.metadata.journal` (on-disk format there), which
fsyncs once per batch. A write coroutine returns once its change is fsynced, so many writers in
flight share one fsync. :attr:`EmbeddedStore.seq` numbers the changes and
:meth:`EmbeddedStore.durable` waits for them: the server still waits for it before answering a
request that changed the store (a belt for writes made without awaiting them).

``Stat.created`` is the store-wide counter (ZooKeeper's zxid) when the node was made; the
counter moves at every change, is persisted (ephemeral creations too), and never goes back.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strom.metadata.journal import FILE_NAME, JOURNAL_NAME, Writer, load
from strom.metadata.store import (
    BadVersionError,
    CreateOp,
    DeleteOp,
    EventType,
    MultiError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    Op,
    SessionListener,
    SetOp,
    Stat,
    StoreError,
    WatchCallback,
    WatchEvent,
)

__all__ = ["FILE_NAME", "JOURNAL_NAME", "EmbeddedStore"]
log = logging.getLogger(__name__)
_Watch = tuple[asyncio.AbstractEventLoop, WatchCallback]


@dataclass
class _Node:
    data: bytes
    version: int
    created: int
    owner: int = 0  # the session of an ephemeral node, 0 for a persistent one
    cversion: int = 0

    def stat(self) -> Stat:
        return Stat(self.version, self.created, self.owner, self.cversion)


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0] or "/"


def _name(path: str) -> str:
    return path.rsplit("/", 1)[1]


def _check(path: str) -> None:
    if not path.startswith("/") or (path != "/" and path.endswith("/")) or "//" in path:
        raise ValueError(f"invalid metadata path {path!r}")


def _join(parent: str, name: str) -> str:
    return f"/{name}" if parent == "/" else f"{parent}/{name}"


class EmbeddedStore:
    """In-process :class:`~strom.metadata.store.MetadataStore` persisted by a writer thread."""

    def __init__(self, data_dir: Path) -> None:
        self._file = Path(data_dir) / FILE_NAME
        self._journal = Path(data_dir) / JOURNAL_NAME
        image = load(self._file, self._journal)
        self._nodes: dict[str, _Node] = {"/": _Node(b"", 0, 0)}
        self._kids: dict[str, set[str]] = {"/": set()}
        for path in sorted(image.nodes):  # parents sort before their children
            data, version, created, cversion = image.nodes[path]
            node = _Node(base64.b64decode(data), version, created, 0, cversion)
            if path == "/":
                self._nodes["/"] = node
                continue
            self._ensure_listed(path)
            self._nodes[path] = node
        self._zxid = image.zxid
        self._session = random.randrange(1, 1 << 62)
        self._data_watches: dict[str, list[_Watch]] = {}
        self._child_watches: dict[str, list[_Watch]] = {}
        self._listeners: list[SessionListener] = []
        self.seq = 0  # changes queued; :meth:`durable` waits for them
        self._writer: Writer | None = Writer(self._file, self._journal, image)

    def _ensure_listed(self, path: str) -> None:
        """Index ``path`` under its parent, adding parents an old data dir lacks."""
        parent = _parent(path)
        if parent not in self._nodes:
            self._ensure_listed(parent)
            self._nodes[parent] = _Node(b"", 0, 0)
        self._kids.setdefault(parent, set()).add(_name(path))
        self._kids.setdefault(path, set())

    # --- the MetadataStore interface -------------------------------------------------------

    @property
    def session_id(self) -> int:
        return self._session

    async def start(self) -> None:
        """Nothing to connect to: the tree was loaded when the store was made."""

    async def create(
        self, path: str, data: bytes = b"", *, ephemeral: bool = False, make_parents: bool = True
    ) -> Stat:
        if make_parents:
            self._make_parents(path)
        node = self._create(path, data, ephemeral)
        await self.durable()
        return node.stat()

    async def create_sequential(self, prefix: str, data: bytes = b"") -> str:
        self._make_parents(prefix)
        parent = self._nodes[_parent(prefix)]
        number = parent.cversion
        while f"{prefix}{number:010d}" in self._nodes:  # a node made with that name by hand
            number += 1
        path = f"{prefix}{number:010d}"
        self._create(path, data, False)
        await self.durable()
        return path

    async def get(self, path: str, watch: WatchCallback | None = None) -> tuple[bytes, Stat]:
        if watch is not None:
            self._add_watch(self._data_watches, path, watch)
        node = self._nodes.get(path)
        if node is None:
            raise NoNodeError(path)
        return node.data, node.stat()

    async def exists(self, path: str, watch: WatchCallback | None = None) -> Stat | None:
        if watch is not None:
            self._add_watch(self._data_watches, path, watch)
        node = self._nodes.get(path)
        return None if node is None else node.stat()

    async def set(self, path: str, data: bytes, version: int = -1) -> Stat:
        node = self._set(path, data, version)
        await self.durable()
        return node.stat()

    async def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None:
        node = self._nodes.get(path)
        if node is None:
            raise NoNodeError(path)
        if version >= 0 and version != node.version:
            raise BadVersionError(f"{path} is at version {node.version}, not {version}")
        if self._kids.get(path) and not recursive:
            raise NotEmptyError(path)
        for below in self._subtree(path):
            self._delete(below)
        await self.durable()

    async def children(self, path: str, watch: WatchCallback | None = None) -> list[str]:
        if path not in self._nodes:
            raise NoNodeError(path)
        if watch is not None:
            self._add_watch(self._child_watches, path, watch)
        return sorted(self._kids.get(path, ()))

    async def multi(self, ops: Sequence[Op]) -> list[Stat | None]:
        self._validate(ops)
        results: list[Stat | None] = []
        for op in ops:
            if isinstance(op, CreateOp):
                results.append(self._create(op.path, op.data, op.ephemeral).stat())
            elif isinstance(op, SetOp):
                results.append(self._set(op.path, op.data, op.version).stat())
            elif isinstance(op, DeleteOp):
                self._delete(op.path)
                results.append(None)
            else:
                results.append(None)
        await self.durable()
        return results

    def add_session_listener(self, listener: SessionListener) -> None:
        self._listeners.append(listener)  # always CONNECTED: never called

    async def close(self) -> None:
        """End the session (its ephemeral nodes go, their watches fire), write everything
        queued, fold the journal into the snapshot, stop the writer."""
        if self._writer is None:
            return
        for path in sorted((p for p, n in self._nodes.items() if n.owner), reverse=True):
            if path in self._nodes:
                self._delete(path)
        self._data_watches.clear()
        self._child_watches.clear()
        writer, self._writer = self._writer, None
        await asyncio.to_thread(writer.close)

    # --- durability ------------------------------------------------------------------------

    async def durable(self, seq: int | None = None) -> None:
        """Return once the changes up to ``seq`` (default: all so far) are fsynced; raises
        :class:`StoreError` if the store could not write them."""
        seq = self.seq if seq is None else seq
        writer = self._writer
        if writer is None:
            return
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        with writer.cond:
            if writer.error is not None:
                raise StoreError(f"metadata store write failed: {writer.error}")
            if writer.durable_seq >= seq:
                return
            writer.waiters.append((seq, loop, fut))
        await fut

    def wait_durable(self, timeout: float | None = None) -> bool:
        """Blocking form of :meth:`durable` for threads and tests; False on timeout."""
        writer = self._writer
        if writer is None:
            return True
        seq = self.seq
        with writer.cond:
            return writer.cond.wait_for(
                lambda: writer.durable_seq >= seq or writer.error is not None, timeout
            ) and writer.error is None

    def _record(self, path: str | None, node: _Node | None) -> None:
        writer = self._writer
        if writer is None:
            raise StoreError("the metadata store is closed")
        rec: dict[str, Any]
        if path is None:
            rec = {"z": self._zxid}
        elif node is None:
            rec = {"p": path, "x": 1, "z": self._zxid}
        else:
            rec = {"p": path, "d": base64.b64encode(node.data).decode(), "v": node.version,
                   "c": node.created, "cv": node.cversion, "z": self._zxid}  # fmt: skip
        self.seq += 1
        writer.submit(self.seq, rec)

    # --- changes (validated by the caller where noted) ---------------------------------------

    def _make_parents(self, path: str) -> None:
        _check(path)
        missing = []
        parent = _parent(path)
        while parent not in self._nodes:
            missing.append(parent)
            parent = _parent(parent)
        for p in reversed(missing):
            self._create(p, b"", False)

    def _create(self, path: str, data: bytes, ephemeral: bool) -> _Node:
        _check(path)
        if path == "/" or path in self._nodes:
            raise NodeExistsError(path)
        parent_path = _parent(path)
        parent = self._nodes.get(parent_path)
        if parent is None:
            raise NoNodeError(parent_path)
        if parent.owner:
            raise StoreError(f"{parent_path} is ephemeral: it cannot have children")
        self._zxid += 1
        node = _Node(bytes(data), 0, self._zxid, self._session if ephemeral else 0)
        self._nodes[path] = node
        self._kids[path] = set()
        self._kids[parent_path].add(_name(path))
        parent.cversion += 1
        if ephemeral:
            self._record(None, None)  # the counter moved: a restart must not give it again
        else:
            self._record(path, node)
        self._fire(self._data_watches, path, EventType.CREATED)
        self._fire(self._child_watches, parent_path, EventType.CHILD)
        return node

    def _set(self, path: str, data: bytes, version: int) -> _Node:
        node = self._nodes.get(path)
        if node is None:
            raise NoNodeError(path)
        if version >= 0 and version != node.version:
            raise BadVersionError(f"{path} is at version {node.version}, not {version}")
        self._zxid += 1
        node.data = bytes(data)
        node.version += 1
        if not node.owner:
            self._record(path, node)
        self._fire(self._data_watches, path, EventType.CHANGED)
        return node

    def _delete(self, path: str) -> None:
        """Remove a node that exists and has no children (checked by the caller)."""
        gone = self._nodes.pop(path)
        del self._kids[path]
        parent_path = _parent(path)
        parent = self._nodes[parent_path]
        self._kids[parent_path].discard(_name(path))
        parent.cversion += 1
        self._zxid += 1
        if not gone.owner:
            self._record(path, None)  # replay bumps the parent's cversion
        self._fire(self._data_watches, path, EventType.DELETED)
        self._fire(self._child_watches, path, EventType.DELETED)
        self._fire(self._child_watches, parent_path, EventType.CHILD)

    def _subtree(self, path: str) -> list[str]:
        """``path`` and every node below it, deepest first."""
        out: list[str] = []
        stack = [path]
        while stack:
            p = stack.pop()
            out.append(p)
            stack.extend(_join(p, k) for k in self._kids.get(p, ()))
        return out[::-1]

    def _validate(self, ops: Sequence[Op]) -> None:
        """Raise :class:`MultiError` unless every op would succeed after the ones before it."""
        overlay: dict[str, int | None] = {}  # path -> version after the ops so far, None: gone
        kids: dict[str, int] = {}  # path -> change in its number of children

        def version_of(path: str) -> int | None:
            if path in overlay:
                return overlay[path]
            node = self._nodes.get(path)
            return None if node is None else node.version

        for index, op in enumerate(ops):
            try:
                _check(op.path)
                current = version_of(op.path)
                if isinstance(op, CreateOp):
                    if current is not None or op.path == "/":
                        raise NodeExistsError(op.path)
                    parent = _parent(op.path)
                    if version_of(parent) is None:
                        raise NoNodeError(parent)
                    if parent in self._nodes and self._nodes[parent].owner:
                        raise StoreError(f"{parent} is ephemeral: it cannot have children")
                    overlay[op.path] = 0
                    kids[parent] = kids.get(parent, 0) + 1
                    continue
                if current is None:
                    raise NoNodeError(op.path)
                if op.version >= 0 and op.version != current:
                    raise BadVersionError(f"{op.path} is at version {current}, not {op.version}")
                if isinstance(op, SetOp):
                    overlay[op.path] = current + 1
                elif isinstance(op, DeleteOp):
                    if len(self._kids.get(op.path, ())) + kids.get(op.path, 0) > 0:
                        raise NotEmptyError(op.path)
                    overlay[op.path] = None
                    parent = _parent(op.path)
                    kids[parent] = kids.get(parent, 0) - 1
            except StoreError as exc:
                raise MultiError(index, exc) from None

    # --- watches ---------------------------------------------------------------------------

    @staticmethod
    def _add_watch(table: dict[str, list[_Watch]], path: str, callback: WatchCallback) -> None:
        table.setdefault(path, []).append((asyncio.get_running_loop(), callback))

    @staticmethod
    def _fire(table: dict[str, list[_Watch]], path: str, kind: EventType) -> None:
        for loop, callback in table.pop(path, ()):
            loop.call_soon(callback, WatchEvent(kind, path))

