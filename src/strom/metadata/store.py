"""The metadata store interface: a small tree of versioned nodes, as ZooKeeper has.

Paths are ``/``-separated. Every node holds bytes and a version that each write bumps (starting
at 0); a write with ``version >= 0`` succeeds only if the node is still at that version (the
compare-and-set that controller epochs and leader fencing are built on). Ephemeral nodes vanish
with the session that created them. Watches fire once per change, after it is applied.

Every call is a coroutine awaited on the broker's event loop; watch and session callbacks are
always invoked on that loop (the ZooKeeper implementation receives them on kazoo's threads and
hands them over with ``loop.call_soon_threadsafe``). A write returns once it is durable
(ZooKeeper: once the ensemble committed it; embedded: once its journal line is fsynced). Reads
may be served from a local cache only where the implementation guarantees read-your-writes on
this session.

Implementations: :mod:`strom.metadata.embedded` (single node, default, no extra process) and
:mod:`strom.metadata.zookeeper` through kazoo (cluster mode). The paths and JSON documents are
Kafka's own (see ``docs/cluster.md``). ``tests/unit/metadata/test_store_contract.py`` runs one
contract suite against both.
"""
from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
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


@dataclass(frozen=True, slots=True)
class Stat:
    """What a read reports about a node, as ZooKeeper's ``ZnodeStat``.

    ``version`` is bumped by every write of the node's data (0 after create). ``created`` is a
    store-wide, monotonically increasing number given at creation (ZooKeeper's ``czxid``): a
    broker's epoch is the ``created`` of its registration node, so a re-registration after a
    lost session always has a higher epoch. ``ephemeral_owner`` is the owning session's id, 0
    for a persistent node. ``children_version`` is bumped when a child is added or removed.
    """

    version: int
    created: int
    ephemeral_owner: int = 0
    children_version: int = 0


class SessionState(enum.Enum):
    """The store session as its listeners see it (kazoo's ``KazooState``).

    ``SUSPENDED``: the connection dropped; ephemeral nodes and watches may still be alive, but
    nothing this process believes about them can be trusted until ``CONNECTED`` again. A leader
    or controller stops acting as one while suspended. ``LOST``: the session expired; its
    ephemeral nodes are gone and its watches will never fire; the owner must re-register, re-read
    and re-watch everything (the implementation reconnects with a new session by itself).
    """

    CONNECTED = "connected"
    SUSPENDED = "suspended"
    LOST = "lost"


class EventType(enum.Enum):
    CREATED = "created"
    DELETED = "deleted"
    CHANGED = "changed"  # the node's data
    CHILD = "child"  # a child was added or removed


@dataclass(frozen=True, slots=True)
class WatchEvent:
    type: EventType
    path: str


WatchCallback = Callable[[WatchEvent], None]
SessionListener = Callable[[SessionState], None]


@dataclass(frozen=True, slots=True)
class CreateOp:
    path: str
    data: bytes = b""
    ephemeral: bool = False


@dataclass(frozen=True, slots=True)
class SetOp:
    path: str
    data: bytes
    version: int = -1


@dataclass(frozen=True, slots=True)
class DeleteOp:
    path: str
    version: int = -1


@dataclass(frozen=True, slots=True)
class CheckOp:
    """Succeeds only if the node exists at ``version`` (controller-epoch fencing)."""

    path: str
    version: int


Op = CreateOp | SetOp | DeleteOp | CheckOp


class MultiError(StoreError):
    """A :meth:`MetadataStore.multi` was refused and nothing of it applied: ``index`` is the
    first failing operation and ``cause`` its error (NoNodeError, BadVersionError …)."""

    def __init__(self, index: int, cause: StoreError) -> None:
        super().__init__(f"operation {index} failed: {cause!r}")
        self.index = index
        self.cause = cause


class SessionLostError(StoreError):
    """The call could not complete because the session is suspended or lost."""


class MetadataStore(Protocol):
    """The asynchronous store (see the module docstring for the threading and durability rules).

    ``watch`` arguments set a one-shot watch atomically with the read, as ZooKeeper does: the
    callback fires once, on the event loop, at the next change after the read (``get``/``exists``:
    the node's data, its creation or deletion; ``children``: a child added or removed, or the
    node deleted). After ``SessionState.LOST`` pending watches never fire.
    """

    @property
    def session_id(self) -> int: ...

    async def start(self) -> None:
        """Connect (ZooKeeper: within the connection timeout, else ``SessionLostError``)."""
        ...

    async def create(
        self, path: str, data: bytes = b"", *, ephemeral: bool = False, make_parents: bool = True
    ) -> Stat:
        """NodeExistsError if present; NoNodeError if a parent is missing and not made."""
        ...

    async def create_sequential(self, prefix: str, data: bytes = b"") -> str:
        """Create the persistent node ``prefix`` + a 10-digit number, parents made as needed,
        as ZooKeeper's SEQUENTIAL flag does (a number ZooKeeper takes from the parent's count
        of child changes: unique under the parent, never given twice, increasing, shared with
        anyone else creating sequential nodes there, Kafka's brokers included); the path
        created."""
        ...

    async def get(self, path: str, watch: WatchCallback | None = None) -> tuple[bytes, Stat]:
        """(data, stat); NoNodeError if absent (a watch is still set, firing at its creation)."""
        ...

    async def exists(self, path: str, watch: WatchCallback | None = None) -> Stat | None: ...

    async def set(self, path: str, data: bytes, version: int = -1) -> Stat:
        """Write; BadVersionError if ``version >= 0`` and stale; NoNodeError if absent."""
        ...

    async def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None:
        """NotEmptyError if it has children and not ``recursive``; NoNodeError if absent."""
        ...

    async def children(self, path: str, watch: WatchCallback | None = None) -> list[str]:
        """Names (not paths) of the node's children, sorted; NoNodeError if absent."""
        ...

    async def multi(self, ops: Sequence[Op]) -> list[Stat | None]:
        """Apply all ``ops`` atomically or none (``MultiError``); the Stat of each created or
        set node, None for deletes and checks."""
        ...

    def add_session_listener(self, listener: SessionListener) -> None:
        """Called on the event loop at every session state change."""
        ...

    async def close(self) -> None:
        """End the session (its ephemeral nodes go at once) and release everything."""
        ...
