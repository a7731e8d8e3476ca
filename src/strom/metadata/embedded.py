"""The embedded metadata store: the single-node default, persisted to one JSON file.

On-disk format (``<data_dir>/strom-metadata.json``)::

    {"format": 1, "nodes": {"/path": {"data": "<base64>", "version": 3}, ...}}

Only persistent nodes are written; ephemeral ones live as long as this process. Every change
rewrites the file through a temporary file, fsync and rename, so a crash leaves either the old
or the new tree, never a torn one. Metadata changes (topic creation, config changes) are rare,
so rewriting the whole file is the simple and safe choice.
"""

from __future__ import annotations

import base64
import json
import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from strom.metadata.store import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    Watcher,
)

FILE_NAME = "strom-metadata.json"


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


class EmbeddedStore:
    """In-process :class:`~strom.metadata.store.MetadataStore` backed by a JSON file."""

    def __init__(self, data_dir: Path) -> None:
        self._file = Path(data_dir) / FILE_NAME
        self._nodes: dict[str, _Node] = {"/": _Node(b"", 0, False)}
        self._watches: dict[str, list[Watcher]] = defaultdict(list)
        if self._file.exists():
            doc = json.loads(self._file.read_text())
            for path, node in doc["nodes"].items():
                self._nodes[path] = _Node(base64.b64decode(node["data"]), node["version"], False)

    def _persist(self) -> None:
        doc = {
            "format": 1,
            "nodes": {
                path: {"data": base64.b64encode(n.data).decode(), "version": n.version}
                for path, n in sorted(self._nodes.items())
                if not n.ephemeral
            },
        }
        tmp = self._file.with_suffix(".tmp")
        with open(tmp, "w") as fh:
            json.dump(doc, fh, indent=1)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self._file)
        dir_fd = os.open(self._file.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def _fire(self, *paths: str) -> None:
        for path in paths:
            for callback in self._watches.pop(path, []):
                callback(path)

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
        self._nodes[path] = _Node(bytes(data), 0, ephemeral)
        if not ephemeral:
            self._persist()
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
            self._persist()
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
            del self._nodes[p]
        self._persist()
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
        self._watches.clear()
