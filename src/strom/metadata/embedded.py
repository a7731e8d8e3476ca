"""The embedded metadata store: the single-node default, persisted by a writer thread.

On-disk format, in ``<data_dir>``:

* ``strom-metadata.json``, a snapshot::

      {"format": 1, "nodes": {"/path": {"data": "<base64>", "version": 3}, ...}}

* ``strom-metadata.journal``, the changes since that snapshot, one JSON object a line:
  ``{"p": "/path", "d": "<base64>", "v": 3}`` (the node's state after the change) or
  ``{"p": "/path", "x": 1}`` (the node is gone). Each line states a result, not an operation,
  so replaying a line twice is harmless.

Reads and writes are served from memory on the caller's thread (the event loop); a write only
queues its journal line. One writer thread appends the queued lines in order, fsyncs once per
batch (group commit), and when the journal outgrows the snapshot writes a new snapshot (temp
file, fsync, rename, directory fsync) and empties the journal. Opening loads the snapshot and
replays the journal up to its first torn line (a crash mid-append), which is cut off.

Durability: every change gets a sequence number (:attr:`EmbeddedStore.seq`);
:meth:`EmbeddedStore.durable` waits until the changes up to a number are fsynced. The broker
awaits it before sending the response of any request that changed the store, so what a
response acknowledges is on disk, while the fsync itself never runs on the event loop.
Only persistent nodes are written; ephemeral ones live as long as this process.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import threading
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strom.metadata.store import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    StoreError,
    Watcher,
)

FILE_NAME = "strom-metadata.json"
JOURNAL_NAME = "strom-metadata.journal"
_MIN_COMPACT_BYTES = 1 << 20
log = logging.getLogger(__name__)


@dataclass
class _Node:
    data: bytes
    version: int
    ephemeral: bool


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0] or "/"


def _check(path: str) -> None:
    if not path.startswith("/") or (path != "/" and path.endswith("/")) or "//" in path:
        raise ValueError(f"invalid metadata path {path!r}")


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _Writer:
    """The writer thread: appends journal lines in order, fsyncs, compacts (module doc)."""

    def __init__(self, snapshot: Path, journal: Path, shadow: dict[str, tuple[str, int]]) -> None:
        self.snapshot = snapshot
        self.journal = journal
        self.shadow = shadow  # what the files hold: path -> (base64 data, version)
        self.cond = threading.Condition()
        self.queue: list[tuple[int, str, dict[str, Any]]] = []
        self.durable_seq = 0
        self.error: BaseException | None = None
        self.closing = False
        self.waiters: list[tuple[int, asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._fd = os.open(journal, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._journal_bytes = os.fstat(self._fd).st_size
        self._snapshot_bytes = snapshot.stat().st_size if snapshot.exists() else 0
        self.thread = threading.Thread(target=self._run, name="strom-metadata-writer",
                                       daemon=True)  # fmt: skip
        self.thread.start()

    def submit(self, seq: int, line: str, record: dict[str, Any]) -> None:
        with self.cond:
            self.queue.append((seq, line, record))
            self.cond.notify()

    def _run(self) -> None:
        while True:
            with self.cond:
                while not self.queue and not self.closing:
                    self.cond.wait()
                batch, self.queue = self.queue, []
                if not batch and self.closing:
                    return
            try:
                self._write(batch)
            except BaseException as exc:  # a broken disk: every later wait fails loudly
                log.exception("metadata store write failed")
                with self.cond:
                    self.error = exc
                    self.cond.notify_all()
                self._wake(batch[-1][0])
                return
            with self.cond:
                self.durable_seq = batch[-1][0]
                self.cond.notify_all()
            self._wake(self.durable_seq)

    def _write(self, batch: list[tuple[int, str, dict[str, Any]]]) -> None:
        data = "".join(line for _seq, line, _rec in batch).encode()
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]
        os.fsync(self._fd)
        self._journal_bytes += len(data)
        for _seq, _line, rec in batch:
            _apply(self.shadow, rec)
        if self._journal_bytes > max(_MIN_COMPACT_BYTES, 2 * self._snapshot_bytes):
            self.compact()

    def compact(self) -> None:
        """Write the shadow tree as the snapshot and empty the journal."""
        doc = {
            "format": 1,
            "nodes": {p: {"data": d, "version": v} for p, (d, v) in sorted(self.shadow.items())},
        }
        tmp = self.snapshot.with_suffix(".tmp")
        with open(tmp, "w") as fh:
            json.dump(doc, fh, indent=1)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.snapshot)
        _fsync_dir(self.snapshot.parent)
        os.ftruncate(self._fd, 0)  # after the rename: a crash between replays lines twice
        os.fsync(self._fd)
        self._snapshot_bytes = self.snapshot.stat().st_size
        self._journal_bytes = 0

    def _wake(self, seq: int) -> None:
        with self.cond:
            due = [w for w in self.waiters if w[0] <= seq or self.error is not None]
            self.waiters = [w for w in self.waiters if w not in due]
        for _seq, loop, fut in due:
            loop.call_soon_threadsafe(_resolve, fut, self.error)

    def close(self) -> None:
        with self.cond:
            self.closing = True
            self.cond.notify()
        self.thread.join()
        if self.error is None:
            self.compact()
        os.close(self._fd)


def _resolve(fut: asyncio.Future[None], error: BaseException | None) -> None:
    if fut.done():
        return
    if error is not None:
        fut.set_exception(StoreError(f"metadata store write failed: {error}"))
    else:
        fut.set_result(None)


def _apply(tree: dict[str, tuple[str, int]], rec: dict[str, Any]) -> None:
    if rec.get("x"):
        tree.pop(rec["p"], None)
    else:
        tree[rec["p"]] = (rec["d"], rec["v"])


def _load(snapshot: Path, journal: Path) -> dict[str, tuple[str, int]]:
    """The snapshot plus the journal's whole lines; a torn tail is cut off the journal."""
    tree: dict[str, tuple[str, int]] = {}
    if snapshot.exists():
        doc = json.loads(snapshot.read_text())
        for path, node in doc["nodes"].items():
            tree[path] = (node["data"], node["version"])
    if journal.exists():
        raw = journal.read_bytes()
        good = 0
        for line in raw.splitlines(keepends=True):
            if not line.endswith(b"\n"):
                break
            try:
                rec = json.loads(line)
            except ValueError:
                break
            _apply(tree, rec)
            good += len(line)
        if good < len(raw):
            log.warning("metadata journal: cut %d bytes of a torn write", len(raw) - good)
            os.truncate(journal, good)
    return tree


class EmbeddedStore:
    """In-process :class:`~strom.metadata.store.MetadataStore` persisted by a writer thread."""

    def __init__(self, data_dir: Path) -> None:
        self._file = Path(data_dir) / FILE_NAME
        self._journal = Path(data_dir) / JOURNAL_NAME
        self._nodes: dict[str, _Node] = {"/": _Node(b"", 0, False)}
        self._watches: dict[str, list[Watcher]] = defaultdict(list)
        tree = _load(self._file, self._journal)
        for path, (data, version) in tree.items():
            self._nodes[path] = _Node(base64.b64decode(data), version, False)
        self.seq = 0  # changes made; :meth:`durable` waits for them
        self._writer: _Writer | None = _Writer(self._file, self._journal, tree)

    # --- persistence -----------------------------------------------------------------------

    def _record(self, path: str, node: _Node | None) -> None:
        writer = self._writer
        if writer is None:
            raise StoreError("the metadata store is closed")
        if node is None:
            rec: dict[str, Any] = {"p": path, "x": 1}
        else:
            rec = {"p": path, "d": base64.b64encode(node.data).decode(), "v": node.version}
        self.seq += 1
        writer.submit(self.seq, json.dumps(rec, separators=(",", ":")) + "\n", rec)

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

    def _fire(self, *paths: str) -> None:
        for path in paths:
            for callback in self._watches.pop(path, []):
                callback(path)

    # --- the MetadataStore interface -------------------------------------------------------

    def create(
        self, path: str, data: bytes = b"", *, ephemeral: bool = False, make_parents: bool = True
    ) -> None:
        _check(path)
        if path in self._nodes:
            raise NodeExistsError(path)
        parent = _parent(path)
        if parent not in self._nodes:
            if not make_parents:
                raise NoNodeError(parent)
            self.create(parent, make_parents=True)
        node = _Node(bytes(data), 0, ephemeral)
        self._nodes[path] = node
        if not ephemeral:
            self._record(path, node)
        self._fire(path, parent)

    def get(self, path: str) -> tuple[bytes, int]:
        node = self._nodes.get(path)
        if node is None:
            raise NoNodeError(path)
        return node.data, node.version

    def exists(self, path: str) -> int | None:
        node = self._nodes.get(path)
        return None if node is None else node.version

    def set(self, path: str, data: bytes, version: int = -1) -> int:
        node = self._nodes.get(path)
        if node is None:
            raise NoNodeError(path)
        if version >= 0 and version != node.version:
            raise BadVersionError(f"{path} is at version {node.version}, not {version}")
        node.data = bytes(data)
        node.version += 1
        if not node.ephemeral:
            self._record(path, node)
        self._fire(path)
        return node.version

    def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None:
        node = self._nodes.get(path)
        if node is None:
            raise NoNodeError(path)
        if version >= 0 and version != node.version:
            raise BadVersionError(f"{path} is at version {node.version}, not {version}")
        prefix = path.rstrip("/") + "/"
        below = [p for p in self._nodes if p.startswith(prefix)]
        if below and not recursive:
            raise NotEmptyError(path)
        for p in below + [path]:
            gone = self._nodes.pop(p)
            if not gone.ephemeral:
                self._record(p, None)
        self._fire(path, _parent(path), *below)

    def children(self, path: str) -> list[str]:
        if path not in self._nodes:
            raise NoNodeError(path)
        prefix = path.rstrip("/") + "/"
        return sorted(
            p[len(prefix) :] for p in self._nodes if p.startswith(prefix) and "/" not in p[len(prefix) :]
        )

    def watch(self, path: str, callback: Watcher) -> None:
        self._watches[path].append(callback)

    def close(self) -> None:
        """Write everything queued, compact the journal into the snapshot, stop the writer."""
        self._watches.clear()
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
