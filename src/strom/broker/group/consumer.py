"""KIP-848 consumer groups: ConsumerGroupHeartbeat, fencing, timers, protocol conversion.

A part of :class:`~strom.broker.group.coordinator.GroupCoordinator` working on the groups of
its :class:`~strom.broker.group.rebalance.Rebalancer` whose :attr:`Group.consumer
<strom.broker.group.model.Group.consumer>` is set. Kafka's ``GroupMetadataManager`` for the
consumer protocol, in three steps per heartbeat:

1. the member is created or updated (its metadata record); when its subscription (topic names
   or regex) changed, or the subscribed topics themselves did (a topic created, grown, deleted:
   the group's *metadata hash* over them changes), the group epoch is bumped;
2. when the group epoch is ahead of the target assignment, the server-side assignor
   (``uniform`` by default, ``range``; the one most members ask for, among
   ``group.consumer.assignors``) computes a new target, and the members whose target changed
   get a record;
3. the member takes its next reconciliation step (:mod:`~strom.broker.group.reconciliation`).

Every change is a list of Kafka's records (:mod:`~strom.broker.group.consumer_records`),
appended acks=-1 and replayed into the group as soon as they are in this leader's log
(:meth:`Rebalancer.append_replayed <strom.broker.group.rebalance.Rebalancer.append_replayed>`)
— the loading path replays the very same records — and the request is answered once they are
replicated. Only the member that heartbeats moves: a member leaving or fenced bumps the group
epoch, and the others learn their new targets at their next heartbeats; nobody stops reading
the partitions it keeps.

Timers per member: the session (``group.consumer.session.timeout.ms`` or the group's
``consumer.session.timeout.ms``; a classic member's own session timeout), renewed by every
heartbeat; the rebalance timeout while it must revoke partitions; for a classic member, its
JoinGroup and SyncGroup deadlines (:mod:`~strom.broker.group.consumer_classic`). A member that
misses one is fenced: removed, its partitions free for the others.

Subscription regexes are RE2, as Kafka's (the ``google-re2`` package; Python's ``re`` has
another syntax), fully matched against every non-internal topic name; the topics each one
resolved to are kept in a regex record and resolved again when topics change.

Migration (Kafka 4): a ConsumerGroupHeartbeat joining an empty classic group replaces it; one
joining a classic group of consumers converts it (``group.consumer.migration.policy``
``upgrade``/``bidirectional``), its members becoming classic members of the consumer group
with their last assignment. When the last member on the consumer protocol leaves a group whose
other members all speak the classic protocol, the group converts back (``downgrade`` /
``bidirectional``) and rebalances as a classic group. Offsets stay with the group either way.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import re2

from strom.broker.group import assignors
from strom.broker.group import consumer_records as cr
from strom.broker.group import records as rec
from strom.broker.group.consumer_model import (
    LEAVE_GROUP_EPOCH,
    LEAVE_GROUP_STATIC_EPOCH,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
)
from strom.broker.group.consumer_records import TopicPartitions
from strom.broker.group.embedded_protocol import (
    EmbeddedProtocolError,
    encode_assignment,
    parse_assignment,
    parse_subscription,
    version_of,
)
from strom.broker.group.model import Group, GroupState, JoinResult, Member, SyncResult
from strom.broker.group.rebalance import Rebalancer, cancel
from strom.broker.group.reconciliation import FencedMember, reconcile
from strom.broker.group.topics_view import StaticTopics, TopicsView
from strom.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)
E = ErrorCode
SESSION, REBALANCE, JOIN, SYNC = "session", "rebalance", "join", "sync"


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    """A ConsumerGroupHeartbeat, as the handler read it (None / -1: unchanged)."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: TopicPartitions | None = None
    client_id: str = ""
    client_host: str = ""
    version: int = 1
    #: the group's own consumer.session.timeout.ms / consumer.heartbeat.interval.ms, if set
    session_timeout_ms: int | None = None
    heartbeat_interval_ms: int | None = None


@dataclass(slots=True)
class HeartbeatResult:
    error: ErrorCode
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: TopicPartitions | None = None


HeartbeatCallback = Callable[[HeartbeatResult], None]


def write_error(code: ErrorCode) -> ErrorCode:
    """A heartbeat's answer for its failed append (Kafka's normalizeException)."""
    if code in (E.unknown_topic_or_partition, E.not_enough_replicas,
                E.not_enough_replicas_after_append, E.request_timed_out):  # fmt: skip
        return E.coordinator_not_available
    if code in (E.not_leader_or_follower, E.kafka_storage_error):
        return E.not_coordinator
    if code in (E.message_too_large, E.record_list_too_large, E.invalid_fetch_size):
        return E.unknown_server_error
    return code


def is_subset(owned: TopicPartitions | None, assigned: TopicPartitions) -> bool:
    if owned is None:
        return False
    return all(p in assigned.get(tid, ()) for tid, ps in owned.items() for p in ps)


class ConsumerGroups:
    """The consumer protocol on the groups of ``core`` (module doc)."""

    def __init__(self, core: Rebalancer, topics: TopicsView | None = None) -> None:
        self.core = core
        self.topics: TopicsView = topics if topics is not None else StaticTopics()
        self._patterns: dict[str, Any] = {}
        # the group overrides last heard per group (session timeout, heartbeat interval)
        self.session_overrides: dict[str, int] = {}

    # queries -------------------------------------------------------------------------------
    def group(self, group_id: str) -> ConsumerGroup | None:
        entry = self.core.groups.get(group_id)
        return entry.consumer if entry is not None else None

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        meta = self.topics.by_id(topic_id)
        return meta.name if meta is not None else None

    def names_of(self, parts: TopicPartitions) -> dict[str, tuple[int, ...]]:
        """An assignment by topic name (topics no longer known left out)."""
        out: dict[str, tuple[int, ...]] = {}
        for tid, ps in parts.items():
            name = self.topic_name(tid)
            if name is not None and ps:
                out[name] = tuple(sorted(ps))
        return out

    def ids_of(self, parts: Mapping[str, Iterable[int]]) -> TopicPartitions:
        """An assignment by topic id (unknown topics left out)."""
        out: TopicPartitions = {}
        for name, ps in parts.items():
            meta = self.topics.get(name)
            if meta is not None:
                out[meta.topic_id] = out.get(meta.topic_id, frozenset()) | frozenset(ps)
        return out

    def default_assignor(self) -> str:
        return self.core.config.consumer_assignors[0] if self.core.config.consumer_assignors else "uniform"

    def session_timeout(self, group_id: str, member: ConsumerMember) -> int:
        if member.classic is not None:
            return member.classic.session_timeout_ms
        return self.session_overrides.get(group_id, self.core.config.consumer_session_timeout_ms)

    # ConsumerGroupHeartbeat ------------------------------------------------------------------
    def check_request(self, req: HeartbeatRequest) -> None:
        """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid (KafkaError)."""

        def invalid(message: str) -> KafkaError:
            return KafkaError(E.invalid_request, message)

        blank = lambda v: v is not None and not v.strip()  # noqa: E731
        if req.version >= 1 and not req.member_id.strip():
            raise invalid("MemberId can't be empty.")
        if not req.group_id.strip():
            raise invalid("GroupId can't be empty.")
        if blank(req.instance_id):
            raise invalid("InstanceId can't be empty.")
        if blank(req.rack_id):
            raise invalid("RackId can't be empty.")
        epoch = req.member_epoch
        if epoch == 0:
            if req.rebalance_timeout_ms == -1:
                raise invalid("RebalanceTimeoutMs must be provided in first request.")
            if req.owned is None or any(req.owned.values()):
                raise invalid("TopicPartitions must be empty when (re-)joining.")
            if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
                raise invalid("Either SubscribedTopicNames or SubscribedTopicRegex must be "
                              "non-null when (re-)joining.")  # fmt: skip
        elif epoch == LEAVE_GROUP_STATIC_EPOCH:
            if req.instance_id is None:
                raise invalid("InstanceId can't be null.")
        elif epoch < LEAVE_GROUP_STATIC_EPOCH:
            raise invalid("MemberEpoch is invalid.")
        if (epoch > 0 or epoch == LEAVE_GROUP_EPOCH) and not req.member_id.strip():
            raise invalid("MemberId can't be empty.")
        assignors_ = self.core.config.consumer_assignors
        if req.server_assignor is not None and req.server_assignor not in assignors_:
            raise KafkaError(E.unsupported_assignor,
                             f"ServerAssignor {req.server_assignor} is not supported. "
                             f"Supported assignors: {', '.join(assignors_)}.")  # fmt: skip
        if req.subscribed_topic_regex:
            self.pattern(req.subscribed_topic_regex)

    def pattern(self, regex: str) -> Any:
        """The compiled RE2 pattern (INVALID_REGULAR_EXPRESSION when it is not one)."""
        compiled = self._patterns.get(regex)
        if compiled is None:
            try:
                compiled = re2.compile(regex)
            except re2.error as exc:
                raise KafkaError(E.invalid_regular_expression,
                                 f"SubscribedTopicRegex `{regex}` is not a valid regular "
                                 f"expression: {exc}.") from None  # fmt: skip
            if len(self._patterns) > 1000:
                self._patterns.clear()
            self._patterns[regex] = compiled
        return compiled

    def heartbeat(self, req: HeartbeatRequest, callback: HeartbeatCallback) -> None:
        def fail(code: ErrorCode, message: str | None = None) -> None:
            callback(HeartbeatResult(code, message, req.member_id or None, req.member_epoch))

        try:
            self.check_request(req)
        except KafkaError as exc:
            return fail(exc.error_code, exc.message)
        if (code := self.core.not_here(req.group_id)) is not None:
            return fail(code)
        if req.session_timeout_ms is not None:
            self.session_overrides[req.group_id] = req.session_timeout_ms
        else:
            self.session_overrides.pop(req.group_id, None)
        try:
            if req.member_epoch in (LEAVE_GROUP_EPOCH, LEAVE_GROUP_STATIC_EPOCH):
                self._leave(req, callback)
            else:
                self._heartbeat(req, callback)
        except KafkaError as exc:
            fail(exc.error_code, exc.message)
        return None

    def _group_for_join(self, group_id: str, epoch: int,
                        records: list[tuple[bytes, bytes | None]]) -> ConsumerGroup:  # fmt: skip
        """The consumer group a heartbeat works on: the existing one, or for a join (epoch 0)
        a new one, replacing an empty classic group or converting a classic group of
        consumers (records added to ``records``). Not installed yet when new."""
        entry = self.core.groups.get(group_id)
        if entry is not None and entry.consumer is not None:
            return entry.consumer
        if epoch != 0:
            # no group, or only its offsets: the member must join again (Kafka would answer
            # GROUP_ID_NOT_FOUND, which librdkafka takes as fatal)
            if entry is None or not entry.members:
                raise KafkaError(E.unknown_member_id, f"Group {group_id} has no such member.")
            raise KafkaError(E.group_id_not_found, f"Group {group_id} is not a consumer group.")
        if entry is None or not entry.members:
            if entry is not None and entry.generation > 0:
                records.append((rec.encode_group_key(rec.GroupKey(group_id)), None))
            return ConsumerGroup(group_id)
        return self._upgrade(entry, records)

    def _heartbeat(self, req: HeartbeatRequest, callback: HeartbeatCallback) -> None:
        cfg = self.core.config
        gid, epoch = req.group_id, req.member_epoch
        records: list[tuple[bytes, bytes | None]] = []
        group = self._group_for_join(gid, epoch, records)
        member_id = req.member_id or str(uuid.uuid4())  # v0: the coordinator names new members
        if len(group.members) >= cfg.consumer_max_size and member_id not in group.members:
            raise KafkaError(E.group_max_size_reached,
                             f"The consumer group has reached its maximum capacity of "
                             f"{cfg.consumer_max_size} members.")  # fmt: skip
        member, replaced = self._member(group, member_id, req, records)
        updated = replace(
            member,
            instance_id=req.instance_id if req.instance_id is not None else member.instance_id,
            rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=(req.rebalance_timeout_ms if req.rebalance_timeout_ms != -1
                                  else member.rebalance_timeout_ms),
            server_assignor=(req.server_assignor if req.server_assignor is not None
                             else member.server_assignor),
            subscribed_topic_names=(tuple(req.subscribed_topic_names)
                                    if req.subscribed_topic_names is not None
                                    else member.subscribed_topic_names),
            subscribed_topic_regex=((req.subscribed_topic_regex or None)
                                    if req.subscribed_topic_regex is not None
                                    else member.subscribed_topic_regex),
            client_id=req.client_id, client_host=req.client_host, classic=None,
        )  # fmt: skip
        reconciled = self.update_member(group, member, updated, replaced, req.owned, records)
        full = epoch == 0 or (req.rebalance_timeout_ms != -1
                              and req.subscribed_topic_names is not None and req.owned is not None)  # fmt: skip
        interval = req.heartbeat_interval_ms or cfg.consumer_heartbeat_interval_ms
        result = HeartbeatResult(E.none, None, member_id, reconciled.member_epoch, interval,
                                 reconciled.assigned if full or reconciled.assigned != member.assigned
                                 else None)  # fmt: skip

        def written() -> None:
            installed = self.install(gid, group, records)
            if replaced is not None:
                self.cancel_timers(installed, replaced)
            self.schedule(installed, member_id, SESSION, self.session_timeout(gid, reconciled))
            self.rebalance_timer(installed, member, reconciled)

        def done(code: ErrorCode) -> None:
            if code is not E.none:
                return callback(HeartbeatResult(write_error(code), None, member_id, epoch))
            return callback(result)

        self.core.append_replayed(gid, records, written, done)

    def _member(self, group: ConsumerGroup, member_id: str, req: HeartbeatRequest,
                records: list[tuple[bytes, bytes | None]]) -> tuple[ConsumerMember, str | None]:  # fmt: skip
        """The member a heartbeat is for (Kafka's getOrMaybeSubscribe*ConsumerGroupMember),
        and the id of the static member it replaces, if any."""
        join = req.member_epoch == 0
        if req.instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                if not join:
                    raise KafkaError(E.unknown_member_id,
                                     f"Member {member_id} is not a member of group {group.group_id}.")  # fmt: skip
                log.info("group %s: member %s joins (consumer protocol)", group.group_id, member_id)
                return ConsumerMember(member_id), None
            self._check_epoch(member, req.member_epoch, req.owned)
            return member, None
        existing = group.static_member(req.instance_id)
        if join:
            if existing is None:
                log.info("group %s: static member %s (%s) joins (consumer protocol)",
                         group.group_id, member_id, req.instance_id)  # fmt: skip
                return group.members.get(member_id) or ConsumerMember(member_id), None
            if not existing.uses_classic and existing.member_epoch != LEAVE_GROUP_STATIC_EPOCH:
                raise KafkaError(E.unreleased_instance_id,
                                 f"Static member {member_id} with instance id {req.instance_id} "
                                 f"cannot join the group because the instance id is owned by "
                                 f"{existing.member_id} member.")  # fmt: skip
            new = replace(existing, member_id=member_id, member_epoch=0, previous_member_epoch=0)
            records.extend(self.member_tombstones(group.group_id, existing.member_id))
            records.append((cr.member_key(cr.MEMBER_METADATA, group.group_id, member_id),
                            cr.member_value(new.metadata())))  # fmt: skip
            records.append((cr.member_key(cr.TARGET_ASSIGNMENT_MEMBER, group.group_id, member_id),
                            cr.target_member_value(group.target.get(existing.member_id, {}))))  # fmt: skip
            records.append((cr.member_key(cr.CURRENT_MEMBER_ASSIGNMENT, group.group_id, member_id),
                            cr.current_assignment_value(new.current())))  # fmt: skip
            log.info("group %s: static member %s rejoins as %s, replacing %s", group.group_id,
                     req.instance_id, member_id, existing.member_id)  # fmt: skip
            return new, existing.member_id
        if existing is None:
            raise KafkaError(E.unknown_member_id, f"Instance id {req.instance_id} is unknown.")
        if existing.member_id != member_id:
            raise KafkaError(E.fenced_instance_id,
                             f"Static member {member_id} with instance id {req.instance_id} was "
                             f"fenced by member {existing.member_id}.")  # fmt: skip
        self._check_epoch(existing, req.member_epoch, req.owned)
        return existing, None

    @staticmethod
    def _check_epoch(member: ConsumerMember, epoch: int, owned: TopicPartitions | None) -> None:
        if epoch > member.member_epoch:
            raise KafkaError(E.fenced_member_epoch,
                             f"The consumer group member has a greater member epoch ({epoch}) "
                             f"than the one known by the group coordinator ({member.member_epoch}). "
                             f"The member must abandon all its partitions and rejoin.")  # fmt: skip
        if epoch < member.member_epoch and (epoch != member.previous_member_epoch
                                            or not is_subset(owned, member.assigned)):  # fmt: skip
            raise KafkaError(E.fenced_member_epoch,
                             f"The consumer group member has a smaller member epoch ({epoch}) "
                             f"than the one known by the group coordinator ({member.member_epoch}). "
                             f"The member must abandon all its partitions and rejoin.")  # fmt: skip

    def update_member(self, group: ConsumerGroup, member: ConsumerMember, updated: ConsumerMember,
                replaced: str | None, owned: TopicPartitions | None,
                records: list[tuple[bytes, bytes | None]]) -> ConsumerMember:  # fmt: skip
        """Steps 1-3 of the module doc for ``updated`` (``member`` as it was; ``replaced``: the
        static member it takes over from): records added, returns the member after its next
        reconciliation step."""
        gid, member_id = group.group_id, updated.member_id
        if updated.metadata() != member.metadata() or member_id not in group.members:
            records.append((cr.member_key(cr.MEMBER_METADATA, gid, member_id),
                            cr.member_value(updated.metadata())))  # fmt: skip
        bump = (updated.subscribed_topic_names != member.subscribed_topic_names
                or updated.subscribed_topic_regex != member.subscribed_topic_regex)  # fmt: skip
        members = dict(group.members)
        if replaced is not None:
            members.pop(replaced, None)
        members[member_id] = updated
        epoch, regexes = self.maybe_bump(group, members, bump, records)
        if epoch > group.assignment_epoch:
            target = self._compute_target(group, members, regexes, epoch, replaced,
                                          records).get(member_id, {})  # fmt: skip
        else:
            epoch = group.assignment_epoch
            target = group.target.get(replaced if replaced is not None else member_id, {})
        try:
            reconciled = reconcile(updated, epoch, target, group.owner_epoch, owned)
        except FencedMember as exc:
            raise KafkaError(E.fenced_member_epoch, str(exc)) from None
        if reconciled != updated or member_id not in group.members:
            records.append((cr.member_key(cr.CURRENT_MEMBER_ASSIGNMENT, gid, member_id),
                            cr.current_assignment_value(reconciled.current())))  # fmt: skip
        return reconciled

    def maybe_bump(self, group: ConsumerGroup, members: Mapping[str, ConsumerMember], bump: bool,
                    records: list[tuple[bytes, bytes | None]],
                    ) -> tuple[int, dict[str, cr.ResolvedRegex]]:  # fmt: skip
        """The group epoch after the subscriptions of ``members`` (bumped, with its record,
        when ``bump`` or the subscribed topics' metadata hash changed), and the members'
        regexes resolved (their records kept up to date)."""
        regexes = self._resolve_regexes(group, members, records)
        old = group.regexes
        if set(regexes) != set(old) or any(old[r].topics != v.topics for r, v in regexes.items()):
            bump = True
        metadata_hash = group.metadata_hash
        if bump or group.hash_version != self.topics.version:
            metadata_hash = self.metadata_hash(self.subscribed(members, regexes))
            if metadata_hash != group.metadata_hash:
                bump = True
        if not bump:
            return group.group_epoch, regexes
        epoch = group.group_epoch + 1
        records.append((cr.group_key(cr.GROUP_METADATA, group.group_id),
                        cr.group_epoch_value(epoch, metadata_hash)))  # fmt: skip
        log.info("group %s: group epoch bumped to %d", group.group_id, epoch)
        return epoch, regexes

    def _resolve_regexes(self, group: ConsumerGroup, members: Mapping[str, ConsumerMember],
                         records: list[tuple[bytes, bytes | None]]) -> dict[str, cr.ResolvedRegex]:  # fmt: skip
        """Each regex the members subscribe with -> the topics it matches now (a record when
        that changed, a tombstone for a regex no member uses any more)."""
        used = {m.subscribed_topic_regex for m in members.values() if m.subscribed_topic_regex}
        out: dict[str, cr.ResolvedRegex] = {}
        version = self.topics.version
        for regex in sorted(used):
            known = group.regexes.get(regex)
            if known is not None and known.version == version:
                out[regex] = known
                continue
            pattern = self.pattern(regex)
            topics = frozenset(n for n in self.topics.names() if pattern.fullmatch(n))
            resolved = cr.ResolvedRegex(topics, version, self.core.clock.time_ms())
            out[regex] = resolved
            if known is None or known.topics != topics:
                records.append((cr.regex_key(group.group_id, regex), cr.regex_value(resolved)))
            else:  # same topics: the newer version is kept in memory only
                group.regexes[regex] = resolved
        for regex in sorted(set(group.regexes) - used):
            records.append((cr.regex_key(group.group_id, regex), None))
        return out

    @staticmethod
    def subscribed(members: Mapping[str, ConsumerMember],
                   regexes: Mapping[str, cr.ResolvedRegex]) -> set[str]:  # fmt: skip
        names: set[str] = set()
        for m in members.values():
            names.update(m.subscribed_topic_names)
            if m.subscribed_topic_regex and m.subscribed_topic_regex in regexes:
                names.update(regexes[m.subscribed_topic_regex].topics)
        return names

    def member_topics(self, member: ConsumerMember,
                      regexes: Mapping[str, cr.ResolvedRegex]) -> set[str]:  # fmt: skip
        names = set(member.subscribed_topic_names)
        if member.subscribed_topic_regex and member.subscribed_topic_regex in regexes:
            names.update(regexes[member.subscribed_topic_regex].topics)
        return names

    def metadata_hash(self, names: Iterable[str]) -> int:
        """A 64-bit hash of the subscribed topics as they are now (id, partition count, replica
        racks): it changes when the assignment may have to (Kafka 4.1's MetadataHash)."""
        h = hashlib.blake2b(digest_size=8)
        for name in sorted(names):
            meta = self.topics.get(name)
            if meta is None:
                continue
            h.update(f"{name}\0{meta.topic_id}\0{meta.partitions}\0".encode())
            for racks in meta.racks:
                h.update(("," .join(sorted(racks)) + ";").encode())
        value = int.from_bytes(h.digest(), "big", signed=True)
        return value or 1  # 0 is "no hash" in Kafka's record

    def _compute_target(self, group: ConsumerGroup, members: Mapping[str, ConsumerMember],
                        regexes: Mapping[str, cr.ResolvedRegex], epoch: int, replaced: str | None,
                        records: list[tuple[bytes, bytes | None]]) -> dict[str, TopicPartitions]:  # fmt: skip
        """The target assignment for ``epoch`` (records for what changed and the new epoch).
        A static member that replaced ``replaced`` starts from that member's target."""
        subs: dict[str, list[uuid.UUID]] = {}
        sizes: dict[uuid.UUID, int] = {}
        racks: dict[uuid.UUID, tuple[frozenset[str], ...]] = {}
        for mid, m in members.items():
            ids = []
            for name in sorted(self.member_topics(m, regexes)):
                meta = self.topics.get(name)
                if meta is None or meta.partitions <= 0:
                    continue
                ids.append(meta.topic_id)
                sizes[meta.topic_id] = meta.partitions
                racks[meta.topic_id] = meta.racks
            subs[mid] = ids
        previous: dict[str, TopicPartitions] = {m: group.target[m] for m in members if m in group.target}
        newcomer = next((m for m in members if m not in group.members), None)
        if replaced is not None and newcomer is not None and replaced in group.target:
            previous[newcomer] = group.target[replaced]
        name = self._assignor_for(group, members)
        if name == "range":
            raw = assignors.range_assign(subs, sizes, {m: members[m].instance_id for m in members})
        else:
            prev = {m: {t: list(ps) for t, ps in parts.items()} for m, parts in previous.items()}
            raw = assignors.uniform(subs, sizes, prev, racks=assignors.Racks(
                {m: members[m].rack_id for m in members}, racks))  # fmt: skip
        targets: dict[str, TopicPartitions] = {
            m: {t: frozenset(ps) for t, ps in raw.get(m, {}).items() if ps} for m in members}
        gid = group.group_id
        for mid, parts in targets.items():
            if previous.get(mid) != parts or mid not in group.target:
                records.append((cr.member_key(cr.TARGET_ASSIGNMENT_MEMBER, gid, mid),
                                cr.target_member_value(parts)))  # fmt: skip
        records.append((cr.group_key(cr.TARGET_ASSIGNMENT_METADATA, gid), cr.target_epoch_value(epoch)))
        log.info("group %s: target assignment for epoch %d computed (%s assignor, %d members)",
                 gid, epoch, name, len(members))  # fmt: skip
        return targets

    def _assignor_for(self, group: ConsumerGroup, members: Mapping[str, ConsumerMember]) -> str:
        votes: dict[str, int] = {}
        for m in members.values():
            if m.server_assignor:
                votes[m.server_assignor] = votes.get(m.server_assignor, 0) + 1
        if not votes:
            return self.default_assignor()
        return max(sorted(votes), key=lambda n: votes[n])

    def install(self, group_id: str, group: ConsumerGroup,
                 records: list[tuple[bytes, bytes | None]]) -> ConsumerGroup:  # fmt: skip
        """Apply ``records`` (just written) to the group, installing it first when it is new
        or replaces a classic group; returns the installed group."""
        entry = self.core.groups.get(group_id)
        if entry is None:
            entry = Group(group_id, state_timestamp=self.core.clock.time_ms())
            self.core.groups[group_id] = entry
        if entry.consumer is not group:
            if entry.consumer is None:
                self._retire_classic(entry)
            installed = ConsumerGroup(group_id)
            entry.consumer = installed
        else:
            installed = group
        self.replay_into(installed, records)
        installed.hash_version = self.topics.version
        return installed

    @staticmethod
    def replay_into(group: ConsumerGroup, records: Iterable[tuple[bytes, bytes | None]]) -> None:
        for key, value in records:
            if cr.record_type(key) in cr.CONSUMER_RECORD_TYPES:
                group.replay(cr.decode_key(key), value)

    def _retire_classic(self, entry: Group) -> None:
        """The classic side of a group that becomes a consumer group: waiting JoinGroup and
        SyncGroup requests are answered REBALANCE_IN_PROGRESS (the members rejoin, now into
        the consumer group), timers cancelled, the classic members forgotten."""
        for timer in (entry.join_timer, entry.sync_timer, *entry.pending_members.values()):
            cancel(timer)
        entry.pending_members.clear()
        for m in entry.members.values():
            cancel(m.heartbeat_timer)
            join, m.join_callback = m.join_callback, None
            sync, m.sync_callback = m.sync_callback, None
            if join is not None:
                join(JoinResult(E.rebalance_in_progress, m.member_id))
            if sync is not None:
                sync(SyncResult(E.rebalance_in_progress))
        entry.members.clear()
        entry.static_members.clear()
        entry.pending_sync.clear()
        entry.leader_id = None
        entry.protocol_name = None
        entry.protocol_type = None
        entry.generation = 0
        entry.state = GroupState.EMPTY
        entry.state_timestamp = self.core.clock.time_ms()

    # leaving and fencing -------------------------------------------------------------------
    def _leave(self, req: HeartbeatRequest, callback: HeartbeatCallback) -> None:
        gid = req.group_id
        group = self.group(gid)
        if group is None:
            raise KafkaError(E.group_id_not_found, f"Consumer group {gid} not found.")
        if req.instance_id is None:
            member = group.members.get(req.member_id)
            if member is None:
                raise KafkaError(E.unknown_member_id,
                                 f"Member {req.member_id} is not a member of group {gid}.")  # fmt: skip
        else:
            member = group.static_member(req.instance_id)
            if member is None:
                raise KafkaError(E.unknown_member_id, f"Instance id {req.instance_id} is unknown.")
            if member.member_id != req.member_id:
                raise KafkaError(E.fenced_instance_id,
                                 f"Static member {req.member_id} with instance id "
                                 f"{req.instance_id} was fenced by member {member.member_id}.")  # fmt: skip
        result = HeartbeatResult(E.none, None, req.member_id, req.member_epoch)

        def done(code: ErrorCode) -> None:
            callback(result if code is E.none else HeartbeatResult(write_error(code), None,
                                                                   req.member_id, req.member_epoch))  # fmt: skip

        if req.member_epoch == LEAVE_GROUP_STATIC_EPOCH:
            # the instance will be back: it keeps its partitions until its session expires
            leaving = replace(member, member_epoch=LEAVE_GROUP_STATIC_EPOCH, pending_revocation={})
            log.info("group %s: static member %s (%s) left for now", gid, member.member_id,
                     req.instance_id)  # fmt: skip
            records: list[tuple[bytes, bytes | None]] = [(
                cr.member_key(cr.CURRENT_MEMBER_ASSIGNMENT, gid, member.member_id),
                cr.current_assignment_value(leaving.current()))]  # fmt: skip

            def written() -> None:
                self.replay_into(group, records)
                cancel(group.timers.get(member.member_id, {}).pop(REBALANCE, None))

            self.core.append_replayed(gid, records, written, done)
            return
        log.info("group %s: member %s left", gid, member.member_id)
        self.fence(gid, member.member_id, "it left the group", done)

    def fence(self, group_id: str, member_id: str, reason: str,
              done: Callable[[ErrorCode], None] | None = None) -> None:  # fmt: skip
        """Remove the member (Kafka's consumerGroupFenceMember): its partitions are free for
        the others at the next epoch; or, when it was the last member on the consumer protocol
        among classic members, convert the group back to a classic one."""
        entry = self.core.groups.get(group_id)
        group = entry.consumer if entry is not None else None
        if entry is None or group is None or member_id not in group.members:
            if done is not None:
                done(E.none)
            return
        log.info("group %s: member %s fenced: %s", group_id, member_id, reason)
        if self._can_downgrade(group, member_id):
            self._downgrade(entry, group, member_id, done)
            return
        records = self.member_tombstones(group_id, member_id)
        members = {m: v for m, v in group.members.items() if m != member_id}
        self.maybe_bump(group, members, True, records)

        def written() -> None:
            self.cancel_timers(group, member_id)
            self.replay_into(group, records)

        self.core.append_replayed(group_id, records, written, done or (lambda code: None))

    @staticmethod
    def member_tombstones(group_id: str, member_id: str) -> list[tuple[bytes, bytes | None]]:
        """Kafka's removeMember, in its order."""
        return [(cr.member_key(cr.CURRENT_MEMBER_ASSIGNMENT, group_id, member_id), None),
                (cr.member_key(cr.TARGET_ASSIGNMENT_MEMBER, group_id, member_id), None),
                (cr.member_key(cr.MEMBER_METADATA, group_id, member_id), None)]  # fmt: skip

    # timers --------------------------------------------------------------------------------
    def schedule(self, group: ConsumerGroup, member_id: str, kind: str, delay_ms: int,
                 only_if_absent: bool = False) -> None:  # fmt: skip
        timers = group.timers.setdefault(member_id, {})
        if only_if_absent and kind in timers:
            return
        cancel(timers.pop(kind, None))
        epoch = group.members[member_id].member_epoch if member_id in group.members else 0
        timers[kind] = self.core.timers.call_later(
            max(delay_ms, 1), lambda: self._expired(group, member_id, kind, epoch))

    def _expired(self, group: ConsumerGroup, member_id: str, kind: str, epoch: int) -> None:
        timers = group.timers.get(member_id, {})
        timers.pop(kind, None)
        if self.group(group.group_id) is not group or member_id not in group.members:
            return
        if kind == REBALANCE and group.members[member_id].member_epoch != epoch:
            return  # it moved on from that epoch in time
        reasons = {SESSION: "its session expired",
                   REBALANCE: f"it did not revoke its partitions of epoch {epoch} in time",
                   JOIN: "the classic member did not rejoin within its rebalance timeout",
                   SYNC: "the classic member did not sync within its rebalance timeout"}  # fmt: skip
        self.fence(group.group_id, member_id, reasons[kind])

    def rebalance_timer(self, group: ConsumerGroup, before: ConsumerMember,
                         after: ConsumerMember) -> None:  # fmt: skip
        if after.uses_classic or after == before:
            return
        if after.state is MemberState.UNREVOKED_PARTITIONS:
            self.schedule(group, after.member_id, REBALANCE, after.rebalance_timeout_ms)
        else:
            cancel(group.timers.get(after.member_id, {}).pop(REBALANCE, None))

    def cancel_timers(self, group: ConsumerGroup, member_id: str) -> None:
        for timer in group.timers.pop(member_id, {}).values():
            cancel(timer)

    def cancel_all(self, group: ConsumerGroup) -> None:
        for member_id in list(group.timers):
            self.cancel_timers(group, member_id)

    def start_sessions(self, group: ConsumerGroup) -> None:
        """After loading: every member's session starts now, and a member that must revoke
        gets its rebalance timeout (Kafka's onLoaded)."""
        for member in group.members.values():
            self.schedule(group, member.member_id, SESSION,
                          self.session_timeout(group.group_id, member))  # fmt: skip
            if member.state is MemberState.UNREVOKED_PARTITIONS and not member.uses_classic:
                self.schedule(group, member.member_id, REBALANCE, member.rebalance_timeout_ms)

    # offsets -------------------------------------------------------------------------------
    def check_commit(self, group: ConsumerGroup, member_id: str, instance_id: str | None,
                     epoch: int, transactional: bool, version: int) -> ErrorCode | None:  # fmt: skip
        """Kafka's ConsumerGroup.validateOffsetCommit: the code refusing the commit, or None."""
        if epoch < 0 and not group.members:
            return None  # an admin's or a non-member consumer's commit
        member = group.members.get(member_id)
        if member is None:
            return E.unknown_member_id
        if not transactional and not member.uses_classic and version < 9:
            return E.unsupported_version
        if epoch != member.member_epoch:
            return E.illegal_generation if member.uses_classic else E.stale_member_epoch
        return None

    def check_fetch(self, group: ConsumerGroup, member_id: str | None,
                    epoch: int) -> ErrorCode | None:  # fmt: skip
        """Kafka's ConsumerGroup.validateOffsetFetch."""
        if member_id is None and epoch < 0:
            return None
        member = group.members.get(member_id or "")
        if member is None:
            return E.unknown_member_id
        if epoch != member.member_epoch:
            return E.illegal_generation if member.uses_classic else E.stale_member_epoch
        return None

    # conversions ---------------------------------------------------------------------------
    def _upgrade(self, entry: Group, records: list[tuple[bytes, bytes | None]]) -> ConsumerGroup:
        """A classic group of consumers as a consumer group (Kafka's convertToConsumerGroup):
        its members keep their last assignment, at the generation as member and group epoch."""
        cfg = self.core.config
        gid = entry.group_id
        if not cfg.upgrade_enabled:
            raise KafkaError(E.group_id_not_found,
                             f"Cannot upgrade classic group {gid} to consumer group because the "
                             f"online upgrade is disabled.")  # fmt: skip
        if entry.protocol_type != "consumer" or entry.protocol_name is None:
            raise KafkaError(E.group_id_not_found,
                             f"Cannot upgrade classic group {gid} to consumer group because the "
                             f"group does not use the consumer embedded protocol.")  # fmt: skip
        if len(entry.members) > cfg.consumer_max_size:
            raise KafkaError(E.group_id_not_found,
                             f"Cannot upgrade classic group {gid} to consumer group because the "
                             f"group size exceeds the consumer group maximum size.")  # fmt: skip
        group = ConsumerGroup(gid, group_epoch=entry.generation, assignment_epoch=entry.generation)
        try:
            for m in entry.members.values():
                sub = parse_subscription(m.metadata(entry.protocol_name))
                assigned = self.ids_of(parse_assignment(m.assignment))
                member = ConsumerMember(
                    m.member_id, m.instance_id, sub.rack_id, m.client_id, m.client_host,
                    tuple(sub.topics), None, m.rebalance_timeout_ms, None,
                    cr.ClassicMetadata(m.session_timeout_ms, tuple(m.protocols)),
                    entry.generation, entry.generation, MemberState.STABLE, assigned, {},
                )  # fmt: skip
                group.put_member(member)
                group.target[m.member_id] = assigned
        except EmbeddedProtocolError as exc:
            raise KafkaError(E.group_id_not_found,
                             f"Cannot upgrade the classic group {gid} to consumer group because "
                             f"the embedded consumer protocol is malformed: {exc}.") from None  # fmt: skip
        records.append((rec.encode_group_key(rec.GroupKey(gid)), None))
        records.extend(group.records())
        log.info("group %s: converting from classic to consumer group (%d members)", gid,
                 len(group.members))  # fmt: skip
        return group

    def start_converted(self, group: ConsumerGroup) -> None:
        """Sessions for the members of a group just converted from classic."""
        for member in group.members.values():
            if member.member_id not in group.timers:
                self.schedule(group, member.member_id, SESSION,
                              self.session_timeout(group.group_id, member))  # fmt: skip

    def _can_downgrade(self, group: ConsumerGroup, leaving: str) -> bool:
        cfg = self.core.config
        if not group.all_classic_except(leaving) or len(group.members) <= 1:
            return False
        if not cfg.downgrade_enabled:
            log.info("group %s: not converted back to classic: the online downgrade is disabled",
                     group.group_id)  # fmt: skip
            return False
        return len(group.members) - 1 <= cfg.max_group_size

    def _downgrade(self, entry: Group, group: ConsumerGroup, leaving: str,
                   done: Callable[[ErrorCode], None] | None) -> None:  # fmt: skip
        """The consumer group becomes a classic group of its classic members (Kafka's
        convertToClassicGroup), Stable at the group epoch with each member's target as its
        assignment, then rebalances as a classic group."""
        gid = group.group_id
        classic = Group(gid, state=GroupState.STABLE, generation=group.group_epoch,
                        protocol_type="consumer", state_timestamp=self.core.clock.time_ms())  # fmt: skip
        for m in group.members.values():
            if m.member_id == leaving or m.classic is None:
                continue
            classic.add(Member(m.member_id, m.instance_id, m.client_id, m.client_host,
                               m.rebalance_timeout_ms, m.classic.session_timeout_ms, "consumer",
                               list(m.classic.protocols)))  # fmt: skip
        classic.protocol_name = classic.select_protocol()
        for cm in classic.members.values():
            version = version_of(cm.metadata(classic.protocol_name))
            cm.assignment = encode_assignment(self.names_of(group.target.get(cm.member_id, {})),
                                              version)  # fmt: skip
        records: list[tuple[bytes, bytes | None]] = list(group.tombstones())
        records.append(self.core.group_record(classic))

        def written() -> None:
            self.cancel_all(group)
            entry.consumer = None
            entry.members = classic.members
            entry.static_members = classic.static_members
            entry.generation = classic.generation
            entry.protocol_type = classic.protocol_type
            entry.protocol_name = classic.protocol_name
            entry.leader_id = classic.leader_id
            entry.state = GroupState.STABLE
            entry.state_timestamp = self.core.clock.time_ms()
            for cm in entry.members.values():
                self.core.schedule_heartbeat(entry, cm)
            log.info("group %s: converted from consumer to classic group", gid)
            self.core.prepare_rebalance(entry)

        self.core.append_replayed(gid, records, written, done or (lambda code: None))
