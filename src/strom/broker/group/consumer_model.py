"""A KIP-848 consumer group's state: members, epochs, target and current assignments.

Mirrors Kafka's ``ConsumerGroup`` / ``ConsumerGroupMember``. Invariants:

- the group epoch grows whenever the group's subscriptions or its subscribed topics change;
  the *target assignment* (what the server-side assignor wants) is computed for an epoch, the
  *assignment epoch* (``assignment_epoch <= group_epoch``);
- each member converges to its target by steps (:mod:`~strom.broker.group.reconciliation`):
  its *assigned* partitions are ones it may read, its *pending revocation* ones it still owns
  but must give up; a partition is owned (assigned or pending revocation) by at most one member
  at a time (:attr:`ConsumerGroup.owners`), so it is never read by two members at once;
- a member is *reconciled* to an epoch when it is Stable at that epoch; the group's state is
  Empty (no members), Assigning (the group epoch is ahead of the target), Reconciling (a member
  is not reconciled to the target) or Stable.

The state is changed only by replaying records (:meth:`ConsumerGroup.replay`), live and while
loading alike (:mod:`~strom.broker.group.consumer_records`), so what a coordinator rebuilds
from the log is what the previous one had. Timers and waiting requests are not state: they
live in the coordinator (:mod:`~strom.broker.group.consumer`).
"""

from __future__ import annotations

import enum
import logging
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

from strom.broker.group import consumer_records as cr
from strom.broker.group.consumer_records import TopicPartitions

log = logging.getLogger(__name__)
LEAVE_GROUP_EPOCH = -1
LEAVE_GROUP_STATIC_EPOCH = -2


class MemberState(enum.IntEnum):
    """Kafka's ``MemberState`` (the byte in the current-assignment record)."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127

    @classmethod
    def of(cls, value: int) -> MemberState:
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


def count(parts: TopicPartitions) -> int:
    return sum(len(ps) for ps in parts.values())


def contains(parts: TopicPartitions, topic_id: uuid.UUID, partition: int) -> bool:
    return partition in parts.get(topic_id, ())


@dataclass(frozen=True, slots=True)
class ConsumerMember:
    """One member: what it subscribes to (its metadata record) and where it is in its
    reconciliation (its current-assignment record). Changed by building a new one
    (``dataclasses.replace``)."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    classic: cr.ClassicMetadata | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: TopicPartitions = field(default_factory=dict)
    pending_revocation: TopicPartitions = field(default_factory=dict)

    @property
    def uses_classic(self) -> bool:
        """Whether the member speaks the classic protocol (JoinGroup/SyncGroup)."""
        return self.classic is not None

    def is_reconciled_to(self, epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == epoch

    def metadata(self) -> cr.MemberMetadata:
        return cr.MemberMetadata(self.instance_id, self.rack_id, self.client_id, self.client_host,
                                 self.subscribed_topic_names, self.subscribed_topic_regex,
                                 self.rebalance_timeout_ms, self.server_assignor, self.classic)  # fmt: skip

    def current(self) -> cr.CurrentAssignment:
        return cr.CurrentAssignment(self.member_epoch, self.previous_member_epoch, int(self.state),
                                    self.assigned, self.pending_revocation)  # fmt: skip

    def with_metadata(self, m: cr.MemberMetadata) -> ConsumerMember:
        return replace(self, instance_id=m.instance_id, rack_id=m.rack_id, client_id=m.client_id,
                       client_host=m.client_host, subscribed_topic_names=m.subscribed_topic_names,
                       subscribed_topic_regex=m.subscribed_topic_regex,
                       rebalance_timeout_ms=m.rebalance_timeout_ms,
                       server_assignor=m.server_assignor, classic=m.classic)  # fmt: skip

    def with_current(self, a: cr.CurrentAssignment) -> ConsumerMember:
        return replace(self, member_epoch=a.member_epoch,
                       previous_member_epoch=a.previous_member_epoch,
                       state=MemberState.of(a.state), assigned=dict(a.assigned),
                       pending_revocation=dict(a.pending_revocation))  # fmt: skip


@dataclass(eq=False)
class ConsumerGroup:
    """A consumer group's durable state (module doc)."""

    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    metadata_hash: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    target: dict[str, TopicPartitions] = field(default_factory=dict)
    #: (topic id, partition) -> the member owning it (assigned or pending revocation)
    owners: dict[tuple[uuid.UUID, int], str] = field(default_factory=dict)
    #: a subscribed regex -> the topics it resolved to
    regexes: dict[str, cr.ResolvedRegex] = field(default_factory=dict)
    #: transient: the topic-registry version the metadata hash was last computed at
    hash_version: int = -1
    #: transient, per member: its timers (kind -> handle)
    timers: dict[str, dict[str, Any]] = field(default_factory=dict)

    # queries -------------------------------------------------------------------------------
    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(not m.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def owner_epoch(self, topic_id: uuid.UUID, partition: int) -> int:
        """The epoch of the member owning the partition, -1 when no member owns it (Kafka's
        currentPartitionEpoch)."""
        owner = self.owners.get((topic_id, partition))
        member = self.members.get(owner) if owner is not None else None
        return member.member_epoch if member is not None else -1

    def static_member(self, instance_id: str | None) -> ConsumerMember | None:
        if instance_id is None:
            return None
        member_id = self.static_members.get(instance_id)
        return self.members.get(member_id) if member_id is not None else None

    def classic_members(self) -> int:
        return sum(1 for m in self.members.values() if m.uses_classic)

    def all_classic_except(self, member_id: str) -> bool:
        """Every member but ``member_id`` speaks the classic protocol, and ``member_id``
        does not (the last consumer-protocol member is leaving)."""
        member = self.members.get(member_id)
        return (member is not None and not member.uses_classic
                and self.classic_members() == len(self.members) - 1)  # fmt: skip

    def waiting_on_unreleased(self, member: ConsumerMember) -> bool:
        """Whether a partition of the member's target is still owned by another member."""
        if member.state is not MemberState.UNRELEASED_PARTITIONS:
            return False
        for tid, parts in self.target.get(member.member_id, {}).items():
            for p in parts:
                if not contains(member.assigned, tid, p) and self.owner_epoch(tid, p) != -1:
                    return True
        return False

    def preferred_assignor(self, default: str) -> str:
        """The server assignor most members asked for (Kafka's preferredServerAssignor), else
        ``default``."""
        votes: dict[str, int] = {}
        for m in self.members.values():
            if m.server_assignor:
                votes[m.server_assignor] = votes.get(m.server_assignor, 0) + 1
        if not votes:
            return default
        return max(sorted(votes), key=lambda name: votes[name])

    # changes (by replay only) -------------------------------------------------------------
    def put_member(self, member: ConsumerMember) -> None:
        old = self.members.get(member.member_id)
        if old is not None:
            self._release(old)
            if (old.instance_id is not None and old.instance_id != member.instance_id
                    and self.static_members.get(old.instance_id) == old.member_id):  # fmt: skip
                del self.static_members[old.instance_id]
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id
        self._own(member)

    def drop_member(self, member_id: str) -> None:
        member = self.members.pop(member_id, None)
        if member is None:
            return
        self._release(member)
        if member.instance_id is not None and self.static_members.get(member.instance_id) == member_id:
            del self.static_members[member.instance_id]

    def _release(self, member: ConsumerMember) -> None:
        for parts in (member.assigned, member.pending_revocation):
            for tid, ps in parts.items():
                for p in ps:
                    if self.owners.get((tid, p)) == member.member_id:
                        del self.owners[(tid, p)]

    def _own(self, member: ConsumerMember) -> None:
        for parts in (member.assigned, member.pending_revocation):
            for tid, ps in parts.items():
                for p in ps:
                    other = self.owners.get((tid, p))
                    if other is not None and other != member.member_id:
                        # never expected: reconciliation gives a partition only once released
                        log.error("group %s: partition %s-%d owned by %s and %s", self.group_id,
                                  tid, p, other, member.member_id)  # fmt: skip
                    self.owners[(tid, p)] = member.member_id

    def replay(self, key: cr.ConsumerKey, value: bytes | None) -> None:
        """Apply one consumer-group record of this group (a group-level tombstone of type 3 is
        the caller's: it removes the whole group)."""
        kind, sub = key.kind, key.sub or ""
        if kind == cr.GROUP_METADATA:
            if value is not None:
                self.group_epoch, self.metadata_hash = cr.decode_group_epoch(value)
        elif kind == cr.TARGET_ASSIGNMENT_METADATA:
            self.assignment_epoch = cr.decode_target_epoch(value) if value is not None else 0
        elif kind == cr.TARGET_ASSIGNMENT_MEMBER:
            if value is None:
                self.target.pop(sub, None)
            else:
                self.target[sub] = cr.decode_target_member(value)
        elif kind == cr.MEMBER_METADATA:
            if value is None:
                self.drop_member(sub)
            else:
                meta = cr.decode_member(value)
                self.put_member((self.members.get(sub) or ConsumerMember(sub)).with_metadata(meta))
        elif kind == cr.CURRENT_MEMBER_ASSIGNMENT:
            base = self.members.get(sub)
            if value is None:
                if base is not None:  # Kafka: the member's assignment is reset
                    self.put_member(replace(base, member_epoch=0, previous_member_epoch=0,
                                            state=MemberState.STABLE, assigned={},
                                            pending_revocation={}))  # fmt: skip
            else:
                self.put_member((base or ConsumerMember(sub)).with_current(
                    cr.decode_current_assignment(value)))  # fmt: skip
        elif kind == cr.REGULAR_EXPRESSION:
            if value is None:
                self.regexes.pop(sub, None)
            else:
                self.regexes[sub] = cr.decode_regex(value)
        # PARTITION_METADATA (before Kafka 4.1): nothing to keep

    def tombstones(self, member_ids: list[str] | None = None) -> list[tuple[bytes, None]]:
        """The records deleting the whole group (Kafka's createGroupTombstoneRecords, in its
        order), naming ``member_ids`` instead of the members' own ids when given."""
        gid = self.group_id
        ids = member_ids if member_ids is not None else list(self.members)
        out: list[tuple[bytes, None]] = []
        out += [(cr.member_key(cr.CURRENT_MEMBER_ASSIGNMENT, gid, m), None) for m in ids]
        out += [(cr.member_key(cr.TARGET_ASSIGNMENT_MEMBER, gid, m), None) for m in ids]
        out.append((cr.group_key(cr.TARGET_ASSIGNMENT_METADATA, gid), None))
        out += [(cr.member_key(cr.MEMBER_METADATA, gid, m), None) for m in ids]
        out += [(cr.regex_key(gid, r), None) for r in sorted(self.regexes)]
        out.append((cr.group_key(cr.PARTITION_METADATA, gid), None))
        out.append((cr.group_key(cr.GROUP_METADATA, gid), None))
        return out

    def records(self) -> list[tuple[bytes, bytes]]:
        """Records that create this group as it is (Kafka's createConsumerGroupRecords: the
        conversion of a classic group writes them)."""
        gid = self.group_id
        out: list[tuple[bytes, bytes]] = []
        for m in self.members.values():
            out.append((cr.member_key(cr.MEMBER_METADATA, gid, m.member_id), cr.member_value(m.metadata())))
        out.append((cr.group_key(cr.GROUP_METADATA, gid),
                    cr.group_epoch_value(self.group_epoch, self.metadata_hash)))  # fmt: skip
        for m in self.members.values():
            out.append((cr.member_key(cr.TARGET_ASSIGNMENT_MEMBER, gid, m.member_id),
                        cr.target_member_value(self.target.get(m.member_id, {}))))  # fmt: skip
        out.append((cr.group_key(cr.TARGET_ASSIGNMENT_METADATA, gid),
                    cr.target_epoch_value(self.assignment_epoch)))  # fmt: skip
        for m in self.members.values():
            out.append((cr.member_key(cr.CURRENT_MEMBER_ASSIGNMENT, gid, m.member_id),
                        cr.current_assignment_value(m.current())))  # fmt: skip
        return out
