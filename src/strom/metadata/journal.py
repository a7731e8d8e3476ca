"""Persistence of the embedded metadata store: a snapshot plus a journal, written by a thread.

On-disk format, in ``<data_dir>``:

* ``strom-metadata.json``, a snapshot::

      {"format": 1, "zxid": 57,
       "nodes": {"/path": {"data": "<base64>", "version": 3, "created": 12, "cversion": 0}, ...}}

* ``strom-metadata.journal``, the changes since that snapshot, one JSON object a line:
  ``{"p": "/path", "d": "<base64>", "v": 3, "c": 12, "cv": 0, "z": 57}`` (the node's state
  after the change), ``{"p": "/path", "x": 1, "z": 58}`` (the node is gone) or ``{"z": 59}``
  (only the store-wide counter moved: an ephemeral node was created). Each line states a result,
  not an operation, so replaying a line twice is harmless.

``zxid`` is the store-wide change counter (ZooKeeper's zxid) and ``created`` the counter's value
when the node was made (``Stat.created``, a broker's epoch): it never goes back, across restarts
too, so a node made again always has a higher ``created``.

Backward compatibility: data directories written before the counter existed have no ``zxid``,
``created``, ``cversion``, ``c``, ``cv`` or ``z``; their snapshot nodes get ``created`` 1, 2, …
in path order at load (parents first), journal lines that make a node get the next number, and
the first compaction writes the numbers down.

One writer thread appends the queued lines in order, fsyncs once per batch (group commit), and
when the journal outgrows the snapshot writes a new snapshot (temp file, fsync, rename,
directory fsync) and empties the journal. Opening loads the snapshot and replays the journal up
to its first torn line (a crash mid-append), which is cut off.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strom.metadata.store import StoreError

FILE_NAME = "strom-metadata.json"
JOURNAL_NAME = "strom-metadata.journal"
_MIN_COMPACT_BYTES = 1 << 20
log = logging.getLogger(__name__)


@dataclass
class Image:
    """What the files hold: path -> (base64 data, version, created, cversion), and the counter."""

    nodes: dict[str, tuple[str, int, int, int]]
    zxid: int = 0

    def apply(self, rec: dict[str, Any]) -> None:
        zxid = rec.get("z")
        path = rec.get("p")
        if path is not None:
            if rec.get("x"):
                self.nodes.pop(path, None)
            else:
                created = rec.get("c")
                if created is None:  # an old line: keep the node's number, or give the next
                    old = self.nodes.get(path)
                    if old is not None:
                        created = old[2]
                    else:
                        self.zxid += 1
                        created = self.zxid
                self.nodes[path] = (rec["d"], rec["v"], created, rec.get("cv", 0))
        if zxid is not None:
            self.zxid = max(self.zxid, zxid)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def load(snapshot: Path, journal: Path) -> Image:
    """The snapshot plus the journal's whole lines; a torn tail is cut off the journal."""
    image = Image({})
    if snapshot.exists():
        doc = json.loads(snapshot.read_text())
        counter = 0
        for path in sorted(doc["nodes"]):
            node = doc["nodes"][path]
            created = node.get("created")
            if created is None:
                counter += 1
                created = counter
            counter = max(counter, created)
            image.nodes[path] = (node["data"], node["version"], created, node.get("cversion", 0))
        image.zxid = max(counter, doc.get("zxid", 0))
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
            image.apply(rec)
            good += len(line)
        if good < len(raw):
            log.warning("metadata journal: cut %d bytes of a torn write", len(raw) - good)
            os.truncate(journal, good)
    return image


class Writer:
    """The writer thread: appends journal lines in order, fsyncs, compacts (module doc)."""

    def __init__(self, snapshot: Path, journal: Path, image: Image) -> None:
        self.snapshot = snapshot
        self.journal = journal
        self.image = image  # what the files hold once the queue is written
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

    def submit(self, seq: int, record: dict[str, Any]) -> None:
        line = json.dumps(record, separators=(",", ":")) + "\n"
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
            self.image.apply(rec)
        if self._journal_bytes > max(_MIN_COMPACT_BYTES, 2 * self._snapshot_bytes):
            self.compact()

    def compact(self) -> None:
        """Write the image as the snapshot and empty the journal."""
        nodes = {
            p: {"data": d, "version": v, "created": c, "cversion": cv}
            for p, (d, v, c, cv) in sorted(self.image.nodes.items())
        }
        doc = {"format": 1, "zxid": self.image.zxid, "nodes": nodes}
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
