"""The metadata store interface: a small tree of versioned nodes, as ZooKeeper has.

Paths are ``/``-separated. Every node holds bytes and a version that each write bumps (starting
at 0); a write with ``version >= 0`` succeeds only if the node is still at that version (the
compare-and-set that controller epochs and leader fencing are built on). Ephemeral nodes vanish
with the session that created them. Watches fire once per change, after it is applied.

Implementations: :mod:`strom.metadata.embedded` (single node, default, no extra process) and a
ZooKeeper one through kazoo (cluster mode, later).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol


class StoreError(Exception):
    """Base of the store's errors."""


class NoNodeError(StoreError):
    pass


class NodeExistsError(StoreError):
    pass


class BadVersionError(StoreError):
    pass


class NotEmptyError(StoreError):
    pass


Watcher = Callable[[str], None]


class MetadataStore(Protocol):
    def create(
        self, path: str, data: bytes = b"", *, ephemeral: bool = False, make_parents: bool = True
    ) -> None: ...

    def get(self, path: str) -> tuple[bytes, int]:
        """(data, version); NoNodeError if absent."""
        ...

    def exists(self, path: str) -> int | None:
        """The node's version, or None."""
        ...

    def set(self, path: str, data: bytes, version: int = -1) -> int:
        """Write and return the new version; BadVersionError if ``version`` is stale."""
        ...

    def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None: ...

    def children(self, path: str) -> list[str]:
        """Names (not paths) of the node's children, sorted; NoNodeError if absent."""
        ...

    def watch(self, path: str, callback: Watcher) -> None:
        """Call ``callback(path)`` once, at the next change of the node or its children."""
        ...

    def close(self) -> None: ...
