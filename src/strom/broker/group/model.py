"""A group's in-memory state: its committed offsets, and its members, classic or KIP-848.

One :class:`Group` per group id holds the group's committed offsets whatever its protocol, and
its membership: Kafka's classic protocol in the fields below (``GroupMetadata`` /
``MemberMetadata``), or, when :attr:`Group.consumer` is set, a KIP-848 consumer group
(:class:`~strom.broker.group.consumer_model.ConsumerGroup`; the classic fields then stay empty:
no members, generation 0). A group converts from one protocol to the other (Kafka 4's online
migration) without losing its offsets. Pure data plus the small queries the coordinator asks
(protocol selection, "have all members rejoined?"); every transition is made by
:class:`strom.broker.group.coordinator.GroupCoordinator`.
"""

from __future__ import annotations

import enum
import struct
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from strom.broker.group.consumer_model import ConsumerGroup
from strom.protocol.errors import ErrorCode


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(slots=True)
class JoinResult:
    error: ErrorCode
    member_id: str
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    skip_assignment: bool = False
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)


@dataclass(slots=True)
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


JoinCallback = Callable[[JoinResult], None]
SyncCallback = Callable[[SyncResult], None]


@dataclass(slots=True)
class OffsetEntry:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    # the order of the commit's append (0: replayed from the log); a commit applied late (it
    # waited for replication) never overwrites a later one. Not part of the value.
    append_seq: int = field(default=0, compare=False)


@dataclass(eq=False, slots=True)
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_callback: JoinCallback | None = None
    sync_callback: SyncCallback | None = None
    is_new: bool = False
    heartbeat_timer: Any = None

    @property
    def awaiting_join(self) -> bool:
        return self.join_callback is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_callback is not None

    def metadata(self, protocol: str | None) -> bytes:
        for name, data in self.protocols:
            if name == protocol:
                return data
        return b""

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols


@dataclass(eq=False, slots=True)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    state_timestamp: int = -1
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    pending_members: dict[str, Any] = field(default_factory=dict)  # member id -> timer
    pending_sync: set[str] = field(default_factory=set)
    offsets: dict[tuple[str, int], OffsetEntry] = field(default_factory=dict)
    # OffsetCommits appended but not yet replicated: partition -> the latest one's append_seq
    # (Kafka's pendingOffsetCommits); they reach ``offsets`` only once replicated
    pending_offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    new_member_added: bool = False
    join_timer: Any = None
    sync_timer: Any = None
    initial_delay_active: bool = False
    initial_delay_remaining_ms: int = 0
    #: a KIP-848 consumer group's membership (None: classic)
    consumer: ConsumerGroup | None = None

    @property
    def group_type(self) -> str:
        """Kafka's group type: ``consumer`` (KIP-848) or ``classic``."""
        return "classic" if self.consumer is None else "consumer"

    @property
    def state_name(self) -> str:
        """The state as Kafka names it for this group's type."""
        return self.state.value if self.consumer is None else self.consumer.state.value

    @property
    def has_members(self) -> bool:
        return bool(self.members) if self.consumer is None else bool(self.consumer.members)

    # membership ------------------------------------------------------------------------------
    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        if (
            member.instance_id is not None
            and self.static_members.get(member.instance_id) == member_id
        ):
            del self.static_members[member.instance_id]
        self.pending_sync.discard(member_id)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def is_static_member_fenced(self, instance_id: str | None, member_id: str) -> bool:
        if instance_id is None:
            return False
        current = self.static_members.get(instance_id)
        return current is not None and current != member_id

    def has_all_members_joined(self) -> bool:
        return not self.pending_members and all(m.awaiting_join for m in self.members.values())

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # protocols -------------------------------------------------------------------------------
    def candidate_protocols(self) -> list[str]:
        """Protocols every member supports, in the first member's order of preference."""
        members = list(self.members.values())
        if not members:
            return []
        common = set.intersection(*({name for name, _ in m.protocols} for m in members))
        return [name for name, _ in members[0].protocols if name in common]

    def supports_protocols(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        if self.state is GroupState.EMPTY or not self.members:
            return (
                bool(protocol_type)
                and bool(protocols)
                and (not self.members or self.protocol_type == protocol_type)
            )
        if protocol_type != self.protocol_type:
            return False
        common = set(self.candidate_protocols())
        return any(name in common for name, _ in protocols)

    def select_protocol(self) -> str:
        candidates = self.candidate_protocols()
        votes: Counter[str] = Counter()
        for m in self.members.values():
            votes[next(name for name, _ in m.protocols if name in candidates)] += 1
        best = max(votes.values())
        return next(name for name in candidates if votes[name] == best)

    def subscribed_topics(self) -> set[str] | None:
        """Topics of the consumer protocol's subscriptions (None if not a consumer group or
        a subscription does not parse)."""
        if self.protocol_type != "consumer" or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for m in self.members.values():
            parsed = parse_subscription_topics(m.metadata(self.protocol_name))
            if parsed is None:
                return None
            topics.update(parsed)
        return topics


def parse_subscription_topics(data: bytes) -> list[str] | None:
    """Topics of a ConsumerProtocolSubscription (any version: they all start the same way)."""
    try:
        pos = 2
        (count,) = struct.unpack_from(">i", data, pos)
        pos += 4
        topics = []
        for _ in range(count):
            (n,) = struct.unpack_from(">h", data, pos)
            pos += 2
            topics.append(data[pos : pos + n].decode("utf-8"))
            pos += n
        return topics
    except (struct.error, UnicodeDecodeError):
        return None
