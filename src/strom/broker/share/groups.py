"""Share-group membership at the group coordinator: ShareGroupHeartbeat as a state machine.

Sans-IO, beside the classic group coordinator: a share group lives in the same
``__consumer_offsets`` partition as any group of its id (the broker leading that partition is
its coordinator, ``ctx.groups.coordinator.not_here`` says whether this is it), and a group id
is of one type only (a classic group's id is GROUP_ID_NOT_FOUND here, and a share group's is
INCONSISTENT_GROUP_PROTOCOL to JoinGroup).

KIP-932's rules, as Kafka 4.2's ``GroupMetadataManager.shareGroupHeartbeat``:

- the member id is the client's (KIP-1082), never empty; member epoch 0 joins (the first
  heartbeat must name the subscribed topics), -1 leaves, anything else must equal the epoch the
  coordinator gave the member (else FENCED_MEMBER_EPOCH; an unknown member UNKNOWN_MEMBER_ID);
- the **group epoch** goes up when a member joins or leaves, a member's subscription changes,
  or the subscribed topics change (created, deleted, more partitions); the target assignment is
  then recomputed for all members (:func:`strom.broker.group.assignors.share_uniform`) and each
  member gets it, with the new epoch, in its next heartbeat's answer — at once: a share
  assignment is not exclusive, so nothing has to be revoked first;
- a member that does not heartbeat for ``share.session.timeout.ms`` is removed; a group of more
  than ``group.share.max.size`` members refuses newcomers (GROUP_MAX_SIZE_REACHED);
- the answer carries the assignment only when it changed since the member last got it.

The group epoch is persisted (record type 11) when it changes, and the share-partitions whose
state was initialized (record type 15, :meth:`ShareGroups.initialized`) when that set changes;
members are in memory only (see :mod:`strom.broker.share.group_records`). Assigned
share-partitions without initialized state are reported by :meth:`ShareGroups.uninitialized`
for the service to initialize.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from strom.broker.group.assignors import share_uniform
from strom.broker.share import group_records as grec
from strom.protocol.errors import ErrorCode

log = logging.getLogger(__name__)
E = ErrorCode
Record = tuple[bytes, bytes | None]
#: a topic name -> (topic id, partition count), None when it does not exist
TopicLookup = Callable[[str], "tuple[uuid.UUID, int] | None"]
#: a topic id -> its name, None when it does not exist
TopicName = Callable[[uuid.UUID], "str | None"]
LEAVE_EPOCH = -1


class Cancellable(Protocol):
    def cancel(self) -> Any: ...


class Timers(Protocol):
    def call_later(self, delay_ms: int, fn: Callable[[], None]) -> Cancellable: ...


@dataclass(slots=True)
class ShareMember:
    member_id: str
    client_id: str
    client_host: str
    rack_id: str | None
    subscribed: tuple[str, ...]
    epoch: int = 0
    assignment: dict[uuid.UUID, list[int]] = field(default_factory=dict)
    #: the assignment as last sent (None: send it in the next answer)
    sent: dict[uuid.UUID, list[int]] | None = None
    session_timer: Cancellable | None = None


@dataclass(slots=True)
class ShareGroup:
    group_id: str
    epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    #: the subscribed topics as the assignment saw them: name -> (id, partitions)
    topics: dict[str, tuple[uuid.UUID, int]] = field(default_factory=dict)
    assignment_epoch: int = 0
    #: share-partitions with initialized state: topic id -> (name, partitions)
    initialized: grec.InitializedTopics = field(default_factory=dict)
    #: being initialized now (not persisted): topic id -> partitions
    initializing: dict[uuid.UUID, set[int]] = field(default_factory=dict)

    @property
    def state(self) -> str:
        """Kafka's share group states: Empty (no members) or Stable."""
        return "Stable" if self.members else "Empty"

    def subscribed_names(self) -> list[str]:
        return sorted({t for m in self.members.values() for t in m.subscribed})


@dataclass(slots=True)
class HeartbeatResult:
    error: ErrorCode
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    #: the member's assignment (topic id -> partitions) when it changed, else None
    assignment: dict[uuid.UUID, list[int]] | None = None


@dataclass(frozen=True, slots=True)
class MemberSettings:
    """The group's settings for a heartbeat (group configs over the broker's)."""

    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    max_size: int = 200


class ShareGroups:
    def __init__(self, clock: Any, timers: Timers, append: Callable[[str, list[Record]], None],
                 not_here: Callable[[str], ErrorCode | None]) -> None:  # fmt: skip
        self.clock = clock
        self.timers = timers
        #: append(group id, records): to the group's __consumer_offsets partition
        self.append = append
        self.not_here = not_here
        self.groups: dict[str, ShareGroup] = {}
        #: group ids of another type (the classic coordinator's): a share heartbeat refuses them
        self.other_type: Callable[[str], bool] = lambda _gid: False

    # --- ShareGroupHeartbeat ---------------------------------------------------------------------
    def heartbeat(self, group_id: str, member_id: str, member_epoch: int, rack_id: str | None,
                  subscribed: Sequence[str] | None, client_id: str, client_host: str,
                  topics: TopicLookup, settings: MemberSettings) -> HeartbeatResult:  # fmt: skip
        if not group_id:
            return HeartbeatResult(E.invalid_group_id, "the group id is empty")
        if (code := self.not_here(group_id)) is not None:
            return HeartbeatResult(code)
        if not member_id:
            return HeartbeatResult(E.invalid_request, "MemberId can't be empty.")
        if member_epoch < LEAVE_EPOCH:
            return HeartbeatResult(E.invalid_request, f"MemberEpoch {member_epoch} is invalid.")
        if member_epoch == 0 and not subscribed:
            return HeartbeatResult(E.invalid_request,
                                   "SubscribedTopicNames must be set in first request.")  # fmt: skip
        if self.other_type(group_id):
            return HeartbeatResult(E.group_id_not_found, f"Group {group_id} is not a share group.")
        group = self.groups.get(group_id)
        if member_epoch == LEAVE_EPOCH:
            if group is not None and member_id in group.members:
                self._remove(group, member_id, "left")
            return HeartbeatResult(E.none, None, member_id, LEAVE_EPOCH)
        if member_epoch == 0:
            if group is None:
                group = self.groups[group_id] = ShareGroup(group_id)
            if member_id not in group.members and len(group.members) >= settings.max_size:
                return HeartbeatResult(E.group_max_size_reached,
                                       f"The share group has reached its maximum capacity of "
                                       f"{settings.max_size} members.")  # fmt: skip
            old = group.members.pop(member_id, None)
            if old is not None and old.session_timer is not None:
                old.session_timer.cancel()
            member = ShareMember(member_id, client_id, client_host, rack_id,
                                 tuple(sorted(set(subscribed or ()))))
            group.members[member_id] = member
            log.info("share group %s: member %s joined (%s)", group_id, member_id,
                     ",".join(member.subscribed))  # fmt: skip
            bump = True
        else:
            found = group.members.get(member_id) if group is not None else None
            if group is None or found is None:
                return HeartbeatResult(E.unknown_member_id,
                                       f"Member {member_id} is not a member of group {group_id}.")  # fmt: skip
            member = found
            if member_epoch != member.epoch:
                return HeartbeatResult(E.fenced_member_epoch,
                                       f"The share group member has an epoch ({member_epoch}) "
                                       f"other than the coordinator's ({member.epoch}).")  # fmt: skip
            bump = False
            if subscribed is not None and tuple(sorted(set(subscribed))) != member.subscribed:
                member.subscribed = tuple(sorted(set(subscribed)))
                bump = True
            member.rack_id = rack_id if rack_id is not None else member.rack_id
        if self._topics_of(group, topics) != group.topics:
            bump = True
        if bump:
            self._bump(group, topics)
        member.epoch = group.assignment_epoch
        self._schedule_session(group, member, settings.session_timeout_ms)
        result = HeartbeatResult(E.none, None, member_id, member.epoch, settings.heartbeat_interval_ms)
        if member.sent != member.assignment:
            member.sent = {t: list(ps) for t, ps in member.assignment.items()}
            result.assignment = member.sent
        return result

    def _topics_of(self, group: ShareGroup, topics: TopicLookup) -> dict[str, tuple[uuid.UUID, int]]:
        out = {}
        for name in group.subscribed_names():
            found = topics(name)
            if found is not None:
                out[name] = found
        return out

    def _bump(self, group: ShareGroup, topics: TopicLookup | None = None) -> None:
        """A new group epoch: the subscribed topics looked up again (with ``topics``), the
        target assignment recomputed, the epoch persisted."""
        if topics is not None:
            group.topics = self._topics_of(group, topics)
        group.epoch += 1
        names = {name: tid for name, (tid, _n) in group.topics.items()}
        members = {m.member_id: [names[t] for t in m.subscribed if t in names]
                   for m in group.members.values()}  # fmt: skip
        target = share_uniform(members, dict(group.topics.values()))
        for m in group.members.values():
            m.assignment = target.get(m.member_id, {})
        group.assignment_epoch = group.epoch
        self.append(group.group_id, [(grec.encode_key(grec.SHARE_GROUP_METADATA, group.group_id),
                                      grec.encode_metadata(group.epoch))])  # fmt: skip

    def _schedule_session(self, group: ShareGroup, member: ShareMember, timeout_ms: int) -> None:
        if member.session_timer is not None:
            member.session_timer.cancel()

        def expired() -> None:
            current = self.groups.get(group.group_id)
            if current is group and group.members.get(member.member_id) is member:
                self._remove(group, member.member_id, f"session timed out after {timeout_ms} ms")

        member.session_timer = self.timers.call_later(timeout_ms, expired)

    def _remove(self, group: ShareGroup, member_id: str, why: str) -> None:
        member = group.members.pop(member_id)
        if member.session_timer is not None:
            member.session_timer.cancel()
        log.info("share group %s: member %s %s", group.group_id, member_id, why)
        self._bump(group)

    # --- share-partition initialization ------------------------------------------------------------
    def uninitialized(self, group_id: str) -> dict[uuid.UUID, list[int]]:
        """Assigned share-partitions whose state is neither initialized nor being initialized
        (which this call marks as being initialized)."""
        group = self.groups.get(group_id)
        if group is None:
            return {}
        wanted: dict[uuid.UUID, set[int]] = {}
        for m in group.members.values():
            for tid, parts in m.assignment.items():
                wanted.setdefault(tid, set()).update(parts)
        out: dict[uuid.UUID, list[int]] = {}
        for tid, assigned in wanted.items():
            have = set(group.initialized.get(tid, ("", frozenset()))[1])
            have |= group.initializing.get(tid, set())
            missing = sorted(assigned - have)
            if missing:
                out[tid] = missing
                group.initializing.setdefault(tid, set()).update(missing)
        return out

    def initialization_done(self, group_id: str, names: TopicName,
                            done: dict[uuid.UUID, list[int]],
                            failed: dict[uuid.UUID, list[int]]) -> None:  # fmt: skip
        """The service initialized ``done`` (persist them as initialized) and failed ``failed``
        (tried again at a later heartbeat)."""
        group = self.groups.get(group_id)
        if group is None:
            return
        for tid, parts in [*done.items(), *failed.items()]:
            pending = group.initializing.get(tid)
            if pending is not None:
                pending.difference_update(parts)
                if not pending:
                    del group.initializing[tid]
        changed = False
        for tid, parts in done.items():
            name = names(tid)
            if name is None:
                continue
            old_name, old = group.initialized.get(tid, (name, frozenset()))
            new = old | frozenset(parts)
            if new != old:
                group.initialized[tid] = (name, new)
                changed = True
        if changed:
            self._persist_initialized(group)

    def forget_initialized(self, group_id: str, topic_ids: Iterable[uuid.UUID]) -> None:
        """Their state was deleted (DeleteShareGroupOffsets, deleted topics)."""
        group = self.groups.get(group_id)
        if group is None:
            return
        gone = [t for t in topic_ids if t in group.initialized]
        for tid in gone:
            del group.initialized[tid]
        if gone:
            self._persist_initialized(group)

    def _persist_initialized(self, group: ShareGroup) -> None:
        key = grec.encode_key(grec.SHARE_GROUP_STATE_PARTITION_METADATA, group.group_id)
        self.append(group.group_id, [(key, grec.encode_state_partitions(group.initialized))])

    def ensure(self, group_id: str) -> ShareGroup:
        """The group, created empty (and persisted at epoch 1) when it did not exist."""
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = ShareGroup(group_id)
            self._bump(group)
        return group

    # --- deletion ------------------------------------------------------------------------------------
    def delete(self, group_id: str) -> ErrorCode:
        """DeleteGroups of an empty share group (NON_EMPTY_GROUP with members): tombstones."""
        group = self.groups.get(group_id)
        if group is None:
            return E.group_id_not_found
        if group.members:
            return E.non_empty_group
        del self.groups[group_id]
        self.append(group_id, [
            (grec.encode_key(grec.SHARE_GROUP_STATE_PARTITION_METADATA, group_id), None),
            (grec.encode_key(grec.SHARE_GROUP_METADATA, group_id), None),
        ])  # fmt: skip
        log.info("share group %s deleted", group_id)
        return E.none

    # --- loading -------------------------------------------------------------------------------
    def replay(self, key: bytes, value: bytes | None) -> None:
        """Apply one share-group record of ``__consumer_offsets`` while loading (types 9, 10,
        12–14 are skipped: see the module doc)."""
        kind = grec.record_type(key)
        if kind not in (grec.SHARE_GROUP_METADATA, grec.SHARE_GROUP_STATE_PARTITION_METADATA):
            return
        gid = grec.decode_group(key)
        if kind == grec.SHARE_GROUP_METADATA:
            if value is None:
                self.groups.pop(gid, None)
                return
            group = self.groups.setdefault(gid, ShareGroup(gid))
            group.epoch = group.assignment_epoch = grec.decode_metadata(value)
            return
        found = self.groups.get(gid)
        if found is None:
            if value is None:
                return
            found = self.groups[gid] = ShareGroup(gid)
        group = found
        group.initialized = {} if value is None else grec.decode_state_partitions(value)

    def unload(self, belongs: Callable[[str], bool]) -> int:
        """Forget the groups for which ``belongs`` is true (their partition moved away)."""
        gone = [gid for gid in self.groups if belongs(gid)]
        for gid in gone:
            for member in self.groups.pop(gid).members.values():
                if member.session_timer is not None:
                    member.session_timer.cancel()
        return len(gone)

    def get(self, group_id: str) -> ShareGroup | None:
        return self.groups.get(group_id)
