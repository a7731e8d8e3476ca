"""ACLs kept in the metadata store and mirrored into every broker's :class:`Authorizer`.

Writes (CreateAcls / DeleteAcls, on whichever broker got them) read-modify-write the resource
pattern's node with the node's version as compare-and-set (retried when another writer was
first), then add a change node naming the pattern (:mod:`strom.security.acl.codec`, Kafka's
layout) and apply the change to this broker's authorizer at once.

Every broker watches the children of both change paths. A new change node makes it re-read
the pattern it names; a gap in the sequence (nodes pruned before this broker saw them), a
change it cannot read, or a lost store session makes it re-read every ACL. So ACLs apply on
every broker without a restart, and a broker that starts (after a kill -9 too) reads them all
before it serves. The writer keeps the newest :data:`KEEP_CHANGES` change nodes and deletes
older ones (Kafka expires them after 15 minutes).

A change node's name is the next number after the highest one present (the store interface has
no sequential nodes); two writers racing for one name retry with the next.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence

from strom.metadata.store import (
    BadVersionError,
    MetadataStore,
    NodeExistsError,
    NoNodeError,
    SessionState,
    StoreError,
    WatchEvent,
)
from strom.metadata.watch_tasks import WatchTasks
from strom.security.acl import codec
from strom.security.acl.authorizer import Authorizer
from strom.security.acl.model import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclError,
    ResourcePattern,
)

log = logging.getLogger(__name__)
KEEP_CHANGES = 100
_CHANGE_ROOTS = (codec.LITERAL_CHANGES, codec.EXTENDED_CHANGES)


class AclStore:
    """The authorizer's ACLs, loaded from and written to ``store`` (module docstring)."""

    def __init__(self, store: MetadataStore, authorizer: Authorizer) -> None:
        self.store = store
        self.authorizer = authorizer
        self._seen: dict[str, int] = {root: -1 for root in _CHANGE_ROOTS}
        self._lock = asyncio.Lock()  # one refresh at a time
        self._background = WatchTasks("ACLs")  # change reads started by watches

    # --- loading and watching ------------------------------------------------------------
    async def start(self) -> None:
        for root in (*_CHANGE_ROOTS, codec.LITERAL_ROOT, codec.PREFIXED_ROOT):
            with contextlib.suppress(NodeExistsError):
                await self.store.create(root)
        await self._reload_all()
        for root in _CHANGE_ROOTS:
            await self._watch_changes(root)
        self.store.add_session_listener(self._on_session)

    async def _read_all(self) -> list[AclBinding]:
        out: list[AclBinding] = []
        for pattern_type in codec.ROOTS:
            for resource_type in codec.STORED_TYPES:
                try:
                    names = await self.store.children(codec.type_path(pattern_type, resource_type))
                except NoNodeError:
                    continue
                for node in names:
                    pattern = ResourcePattern(resource_type, codec.name_of(node), pattern_type)
                    out.extend(AclBinding(pattern, e) for e in await self._read(pattern))
        return out

    async def _read(self, pattern: ResourcePattern) -> set[AccessControlEntry]:
        try:
            data, _ = await self.store.get(codec.resource_path(pattern))
        except NoNodeError:
            return set()
        try:
            return codec.decode_entries(data)
        except AclError as exc:
            log.error("ACLs of %s ignored: %s", pattern, exc)
            return set()

    async def _reload_all(self) -> None:
        # the change sequences first: a change made while reading is then seen again, not lost
        for root in _CHANGE_ROOTS:
            with contextlib.suppress(NoNodeError):
                seqs = [codec.change_sequence(n) for n in await self.store.children(root)]
                self._seen[root] = max(seqs, default=-1)
        self.authorizer.replace_all(await self._read_all())
        log.info("ACLs loaded: %d", len(self.authorizer.bindings()))

    async def _watch_changes(self, root: str) -> list[str]:
        def fired(_event: WatchEvent) -> None:
            self._background.spawn(self._on_changes(root))

        try:
            return await self.store.children(root, watch=fired)
        except NoNodeError:
            return []

    async def _on_changes(self, root: str) -> None:
        async with self._lock:
            try:
                nodes = await self._watch_changes(root)  # re-armed before reading
                await self._apply_changes(root, nodes)
            except StoreError as exc:  # the session's listener reloads everything
                log.warning("ACL changes not read: %s", exc)

    async def _apply_changes(self, root: str, nodes: list[str]) -> None:
        fresh = sorted((s, n) for n in nodes if (s := codec.change_sequence(n)) > self._seen[root])
        if not fresh:
            return
        if fresh[0][0] > self._seen[root] + 1 and self._seen[root] >= 0:
            # pruned before this broker saw them, or numbered past a gap: read everything
            await self._reload_all()
            return
        patterns = set()
        for seq, node in fresh:
            try:
                data, _ = await self.store.get(f"{root}/{node}")
                patterns.add(codec.decode_change(root, data))
            except NoNodeError:
                await self._reload_all()
                return
            except (AclError, UnicodeDecodeError) as exc:
                log.warning("ACL change %s unreadable (%s): reloading every ACL", node, exc)
                await self._reload_all()
                return
            self._seen[root] = seq
        for pattern in patterns:
            self.authorizer.set_acls(pattern, await self._read(pattern))

    def _on_session(self, state: SessionState) -> None:
        if state == SessionState.CONNECTED:
            self._background.spawn(self._resync())  # dropped unstarted once closed

    async def _resync(self) -> None:
        async with self._lock:
            try:
                await self._reload_all()
                for root in _CHANGE_ROOTS:
                    await self._watch_changes(root)
            except StoreError as exc:
                log.warning("ACLs not reloaded after the session came back: %s", exc)

    async def close(self) -> None:
        await self._background.close()

    # --- writing -------------------------------------------------------------------------
    async def _update(self, pattern: ResourcePattern, add: set[AccessControlEntry],
                      remove: set[AccessControlEntry]) -> frozenset[AccessControlEntry]:  # fmt: skip
        """Add and remove entries of one pattern (CAS, retried); the entries now stored."""
        path = codec.resource_path(pattern)
        while True:
            try:
                data, stat = await self.store.get(path)
                current = codec.decode_entries(data)
                version = stat.version
            except NoNodeError:
                current, version = set(), -1
            updated = (current | add) - remove
            if updated == current:
                return frozenset(current)
            try:
                if version < 0:
                    await self.store.create(path, codec.encode_entries(updated))
                elif updated:
                    await self.store.set(path, codec.encode_entries(updated), version)
                else:
                    await self.store.delete(path, version)
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue  # another writer was first: read again
            await self._notify(pattern)
            self.authorizer.set_acls(pattern, updated)
            return frozenset(updated)

    async def _notify(self, pattern: ResourcePattern) -> None:
        root = codec.change_root(pattern.pattern_type)
        data = codec.encode_change(pattern)
        while True:
            nodes = await self.store.children(root)
            seqs = sorted(s for s in map(codec.change_sequence, nodes) if s >= 0)
            try:
                await self.store.create(f"{root}/{codec.change_node((seqs[-1] if seqs else -1) + 1)}",
                                        data)  # fmt: skip
            except NodeExistsError:
                continue
            for old in seqs[:max(0, len(seqs) + 1 - KEEP_CHANGES)]:
                with contextlib.suppress(NoNodeError):
                    await self.store.delete(f"{root}/{codec.change_node(old)}")
            return

    async def create(self, bindings: Sequence[AclBinding]) -> None:
        """Store every binding (each already validated)."""
        by_pattern: dict[ResourcePattern, set[AccessControlEntry]] = {}
        for b in bindings:
            by_pattern.setdefault(b.pattern, set()).add(b.entry)
        for pattern, entries in by_pattern.items():
            await self._update(pattern, entries, set())

    async def delete(self, filters: Sequence[AclBindingFilter]) -> list[list[AclBinding]]:
        """Remove every stored binding each filter matches; per filter, what it removed (a
        binding two filters match is reported for both, as Kafka does)."""
        matched = [self.authorizer.bindings(f) for f in filters]
        doomed: dict[ResourcePattern, set[AccessControlEntry]] = {}
        for bindings in matched:
            for b in bindings:
                doomed.setdefault(b.pattern, set()).add(b.entry)
        for pattern, entries in doomed.items():
            await self._update(pattern, set(), entries)
        return matched
