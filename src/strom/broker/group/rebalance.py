"""The group state machine: groups, group records, rebalance transitions and timers.

:class:`Rebalancer` holds the groups, the injected ports (a :class:`~strom.clock.Clock`,
:class:`Timers` and ``append``) and the ``loading`` flag. Invariants: every durable change goes
through ``append`` *before* the in-memory state changes and before a response is given. Offset
commits and group records are written acks=-1 (:meth:`~Rebalancer.append_acked`, Kafka's
``appendForGroup``): their change is applied, and their request answered, only in the
completion callback, once the records are replicated (at the high watermark) — on a single node
that is at once, inside the call; on failure nothing changes and the error is mapped as Kafka's
GroupMetadataManager does (:func:`offset_write_error`, :func:`group_write_error`). Deletions and
expiry are leader-local (:meth:`~Rebalancer.append` raises if it cannot write; Kafka's
cleanupGroupMetadata, acks=0). A group's ``state_timestamp`` changes only with its state
(:meth:`~Rebalancer.transition`); a timer or append callback acts only if its group is still
the current one (a deleted group may be recreated under the same id) and, where it matters, in
the state and generation it was armed for.

Groups move Empty → PreparingRebalance → CompletingRebalance → Stable, as in Kafka's classic
protocol. A rebalance is prepared when membership or a member's protocols change; it completes
(a new generation, a leader elected among the members that rejoined, the join callbacks
answered) once every member rejoined, when the rebalance timeout fires, or after
``group.initial.rebalance.delay.ms`` for a group that was Empty (extended while new members keep
arriving). Members that did not rejoin are removed, except static members. Then every member
must SyncGroup within the rebalance timeout or be removed. Timers: a heartbeat (session) timer
per member, the group's join and sync timers, and the initial delay.

The parts that work on it, each holding the same :class:`Rebalancer` (composition, no base
classes): :mod:`~strom.broker.group.membership` (JoinGroup), :mod:`~strom.broker.group.offsets`
and :class:`~strom.broker.group.coordinator.GroupCoordinator`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from strom.broker.group import records as rec
from strom.broker.group.consumer_model import ConsumerGroup
from strom.broker.group.model import (
    Group,
    GroupState,
    JoinResult,
    Member,
    OffsetEntry,
    SyncResult,
)
from strom.clock import Clock
from strom.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)
E = ErrorCode


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class Timers(Protocol):
    def call_later(self, delay_ms: int, fn: Callable[[], None]) -> Cancellable: ...


# the outcome of an acks=-1 append: NONE once replicated, else the (unmapped) append error
AppendDone = Callable[[ErrorCode], None]
# (partition, records, done): append as the leader, raising if nothing could be written. With
# ``done`` it is acks=-1: ``done`` is called exactly once — synchronously when the high watermark
# is already past the records (a single node), later otherwise; raising NOT_ENOUGH_REPLICAS
# before writing anything. Without ``done``: leader-local.
AppendFn = Callable[[int, list[tuple[bytes, bytes | None]], AppendDone | None], None]
# (partition, records, producer id, producer epoch, done): a transactional batch
# (TxnOffsetCommit), acks=-1 as above
TxnAppendFn = Callable[[int, list[tuple[bytes, bytes | None]], int, int, AppendDone], None]


def offset_write_error(code: ErrorCode) -> ErrorCode:
    """An OffsetCommit's answer for its failed append (Kafka's storeOffsets; REQUEST_TIMED_OUT
    as the newer coordinator's normalizeException: retriable for the client)."""
    if code in (E.unknown_topic_or_partition, E.not_enough_replicas,
                E.not_enough_replicas_after_append, E.request_timed_out):  # fmt: skip
        return E.coordinator_not_available
    if code in (E.not_leader_or_follower, E.kafka_storage_error):
        return E.not_coordinator
    if code in (E.message_too_large, E.record_list_too_large, E.invalid_fetch_size):
        return E.invalid_commit_offset_size
    return code


def group_write_error(code: ErrorCode) -> ErrorCode:
    """The members' answer for a failed group record append (Kafka's storeGroup)."""
    if code in (E.unknown_topic_or_partition, E.not_enough_replicas,
                E.not_enough_replicas_after_append):  # fmt: skip
        return E.coordinator_not_available
    if code in (E.not_leader_or_follower, E.kafka_storage_error):
        return E.not_coordinator
    if code is E.request_timed_out:
        return E.rebalance_in_progress
    if code in (E.message_too_large, E.record_list_too_large, E.invalid_fetch_size):
        return E.unknown_server_error
    return code


def append_error(exc: BaseException) -> ErrorCode:
    """The code of an append that raised: its Kafka code, COORDINATOR_NOT_AVAILABLE for any
    other failure (a local I/O error)."""
    code = getattr(exc, "error_code", None)
    return code if isinstance(code, ErrorCode) else E.coordinator_not_available


def once(done: AppendDone) -> AppendDone:
    """``done`` guarded against a second call (a port that both called it and raised)."""
    called = False

    def call(code: ErrorCode) -> None:
        nonlocal called
        if not called:
            called = True
            done(code)

    return call


@dataclass(frozen=True, slots=True)
class CoordinatorConfig:
    offsets_partitions: int = 50
    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    max_group_size: int = 2**31 - 1
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offset_metadata_max_bytes: int = 4096
    # KIP-848 consumer groups (group.consumer.*, Kafka's defaults)
    consumer_heartbeat_interval_ms: int = 5000
    consumer_session_timeout_ms: int = 45000
    consumer_assignors: tuple[str, ...] = ("uniform", "range")
    consumer_max_size: int = 2**31 - 1
    migration_policy: str = "bidirectional"

    @property
    def upgrade_enabled(self) -> bool:
        """A non-empty classic group may convert to a consumer group."""
        return self.migration_policy.lower() in ("bidirectional", "upgrade")

    @property
    def downgrade_enabled(self) -> bool:
        """A non-empty consumer group may convert back to a classic group."""
        return self.migration_policy.lower() in ("bidirectional", "downgrade")


def cancel(timer: Any) -> None:
    if timer is not None:
        timer.cancel()


class Rebalancer:
    def __init__(self, config: CoordinatorConfig, clock: Clock, timers: Timers, append: AppendFn):
        self.config = config
        self.clock = clock
        self.timers = timers
        self._append = append
        self.groups: dict[str, Group] = {}
        self.loading = True
        # the partitions of __consumer_offsets whose groups this coordinator serves (it leads
        # them and loaded them); None: every partition (a single coordinator, unit tests)
        self.owned: set[int] | None = None
        # filled by GroupCoordinator.replay while loading, emptied by finish_loading
        self.loaded_meta: dict[str, rec.GroupValue | None] = {}
        self.loaded_offsets: dict[str, dict[tuple[str, int], OffsetEntry]] = {}
        # KIP-848 groups staged while loading, and which protocol an id's last group record had
        self.loaded_consumer: dict[str, ConsumerGroup] = {}
        self.loaded_kind: dict[str, str] = {}
        # TxnOffsetCommit: offsets written in a transaction, by producer id, until its marker
        self.pending_txn_offsets: dict[int, dict[tuple[str, str, int], OffsetEntry]] = {}
        self.append_txn: TxnAppendFn | None = None
        # for the broker's metrics: rebalances begun (to PreparingRebalance) and generations
        # formed (to CompletingRebalance) since start
        self.rebalances = 0
        self.completed_rebalances = 0

    # persistence -----------------------------------------------------------------------------
    def partition_for(self, group_id: str) -> int:
        return rec.partition_for(group_id, self.config.offsets_partitions)

    def not_here(self, group_id: str) -> ErrorCode | None:
        """COORDINATOR_LOAD_IN_PROGRESS while loading, NOT_COORDINATOR for a group of a
        partition this coordinator does not own, else None (Kafka's checks before every
        group operation)."""
        if self.loading:
            return E.coordinator_load_in_progress
        if self.owned is not None and self.partition_for(group_id) not in self.owned:
            return E.not_coordinator
        return None

    def append(self, group_id: str, records: list[tuple[bytes, bytes | None]]) -> None:
        """Leader-local append (deletions, expiry); raises if it cannot write."""
        if records:
            self._append(self.partition_for(group_id), records, None)

    def append_acked(
        self, group_id: str, records: list[tuple[bytes, bytes | None]], done: AppendDone
    ) -> None:
        """acks=-1 append: ``done(code)`` exactly once, with NONE once the records are
        replicated or the unmapped error (also when the append raised at once)."""
        done = once(done)
        if not records:
            done(E.none)
            return
        try:
            self._append(self.partition_for(group_id), records, done)
        except Exception as exc:
            log.warning("group %s: append to the offsets topic failed: %s", group_id, exc)
            done(append_error(exc))

    def append_replayed(
        self, group_id: str, records: list[tuple[bytes, bytes | None]],
        written: Callable[[], None], done: AppendDone,
    ) -> None:  # fmt: skip
        """acks=-1 append of records whose change is applied by replaying them (KIP-848 consumer
        groups): ``written()`` once the records are in this leader's log — before any other
        request is handled, so the next one sees the change — then ``done(code)`` once they are
        replicated (NONE) or could not be (the unmapped error). If nothing could be written,
        only ``done(error)``, and nothing changes. No records: both at once."""
        state = {"written": False}

        def mark() -> None:
            if not state["written"]:
                state["written"] = True
                written()

        def finished(code: ErrorCode) -> None:
            mark()  # ``done`` is only ever called once the records are in the log
            done(code)

        finish = once(finished)
        if not records:
            finish(E.none)
            return
        try:
            self._append(self.partition_for(group_id), records, finish)
        except Exception as exc:
            if state["written"]:
                raise
            log.warning("group %s: append to the offsets topic failed: %s", group_id, exc)
            done(append_error(exc))
            return
        mark()

    def group_record(
        self, group: Group, assignment: dict[str, bytes] | None = None
    ) -> tuple[bytes, bytes]:
        members = tuple(
            rec.MemberValue(
                m.member_id, m.instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                m.session_timeout_ms, m.metadata(group.protocol_name),
                assignment.get(m.member_id, b"") if assignment is not None else m.assignment,
            )
            for m in group.members.values()
        )  # fmt: skip
        value = rec.GroupValue(
            group.protocol_type or "", group.generation, group.protocol_name, group.leader_id,
            group.state_timestamp, members,
        )  # fmt: skip
        return rec.encode_group_key(rec.GroupKey(group.group_id)), rec.encode_group_value(value)

    def store_group(
        self, group: Group, done: AppendDone, assignment: dict[str, bytes] | None = None
    ) -> None:
        """Write the group record acks=-1 (Kafka's storeGroup); ``done`` gets the mapped code."""
        record = self.group_record(group, assignment)
        self.append_acked(group.group_id, [record], lambda code: done(group_write_error(code)))

    # helpers ---------------------------------------------------------------------------------
    def current(self, group: Group) -> bool:
        return self.groups.get(group.group_id) is group

    def transition(self, group: Group, state: GroupState) -> None:
        if state is GroupState.PREPARING_REBALANCE:
            self.rebalances += 1
        elif state is GroupState.COMPLETING_REBALANCE:
            self.completed_rebalances += 1
        group.state = state
        group.state_timestamp = self.clock.time_ms()

    def member_list(self, group: Group) -> list[tuple[str, str | None, bytes]]:
        return [
            (m.member_id, m.instance_id, m.metadata(group.protocol_name))
            for m in group.members.values()
        ]

    def join_result(self, group: Group, member_id: str, *, skip: bool = False) -> JoinResult:
        leader = group.leader_id == member_id
        return JoinResult(
            E.none, member_id, group.generation, group.protocol_type, group.protocol_name,
            group.leader_id or "", skip, self.member_list(group) if leader else [],
        )  # fmt: skip

    def get_group(self, group_id: str) -> Group | None:
        if (code := self.not_here(group_id)) is not None:
            raise KafkaError(code)
        return self.groups.get(group_id)

    # heartbeats ------------------------------------------------------------------------------
    def schedule_heartbeat(
        self, group: Group, member: Member, timeout_ms: int | None = None
    ) -> None:
        cancel(member.heartbeat_timer)
        delay = member.session_timeout_ms if timeout_ms is None else timeout_ms
        member.heartbeat_timer = self.timers.call_later(
            delay, lambda: self.on_heartbeat_expired(group, member)
        )

    def on_heartbeat_expired(self, group: Group, member: Member) -> None:
        if not self.current(group) or group.members.get(member.member_id) is not member:
            return
        if member.is_new or not (member.awaiting_join or member.awaiting_sync):
            log.info("group %s: member %s session expired", group.group_id, member.member_id)
            self.remove_member_and_update_group(group, member)

    # rebalance -------------------------------------------------------------------------------
    def maybe_prepare_rebalance(self, group: Group) -> None:
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY):
            self.prepare_rebalance(group)

    def prepare_rebalance(self, group: Group) -> None:
        if group.state is GroupState.COMPLETING_REBALANCE:
            self.propagate_assignment_error(group, E.rebalance_in_progress)
        cancel(group.sync_timer)
        cancel(group.join_timer)
        if group.state is GroupState.EMPTY:
            delay = self.config.initial_rebalance_delay_ms
            group.initial_delay_active = True
            group.initial_delay_remaining_ms = max(group.rebalance_timeout_ms - delay, 0)
            group.join_timer = self.timers.call_later(delay, lambda: self.on_initial_delay(group))
        else:
            group.initial_delay_active = False
            group.join_timer = self.timers.call_later(
                group.rebalance_timeout_ms, lambda: self.complete_join(group)
            )
        self.transition(group, GroupState.PREPARING_REBALANCE)
        log.info("group %s: preparing rebalance (generation %d)", group.group_id, group.generation)
        self.maybe_complete_join(group)

    def on_initial_delay(self, group: Group) -> None:
        if not self.current(group) or not group.initial_delay_active:
            return
        if group.new_member_added and group.initial_delay_remaining_ms > 0:
            group.new_member_added = False
            delay = min(self.config.initial_rebalance_delay_ms, group.initial_delay_remaining_ms)
            group.initial_delay_remaining_ms = max(group.initial_delay_remaining_ms - delay, 0)
            group.join_timer = self.timers.call_later(delay, lambda: self.on_initial_delay(group))
        else:
            self.complete_join(group)

    def maybe_complete_join(self, group: Group) -> None:
        if (
            group.state is GroupState.PREPARING_REBALANCE
            and not group.initial_delay_active
            and group.has_all_members_joined()
        ):
            self.complete_join(group)

    def complete_join(self, group: Group) -> None:
        if not self.current(group) or group.state is not GroupState.PREPARING_REBALANCE:
            return
        cancel(group.join_timer)
        group.join_timer = None
        group.initial_delay_active = False
        for member in list(group.members.values()):
            if not member.awaiting_join and member.instance_id is None:
                log.info("group %s: member %s did not rejoin", group.group_id, member.member_id)
                cancel(member.heartbeat_timer)
                group.remove(member.member_id)
        if not self.elect_joined_leader(group) and group.members:
            group.join_timer = self.timers.call_later(
                group.rebalance_timeout_ms, lambda: self.complete_join(group)
            )
            return
        group.generation += 1
        group.pending_sync.clear()
        if not group.members:
            group.protocol_name = None
            self.transition(group, GroupState.EMPTY)

            def stored(code: ErrorCode) -> None:
                if code is not E.none:  # as Kafka: only logged (the group is Empty either way)
                    log.warning("group %s: storing empty generation failed: %s",
                                group.group_id, code.name)  # fmt: skip

            self.store_group(group, stored)
            log.info("group %s: generation %d is empty", group.group_id, group.generation)
            return
        group.protocol_name = group.select_protocol()
        self.transition(group, GroupState.COMPLETING_REBALANCE)
        log.info(
            "group %s: generation %d with %d members, protocol %s, leader %s",
            group.group_id, group.generation, len(group.members), group.protocol_name, group.leader_id,
        )  # fmt: skip
        for member in list(group.members.values()):
            callback, member.join_callback = member.join_callback, None
            if callback is not None:
                callback(self.join_result(group, member.member_id))
            self.schedule_heartbeat(group, member)
            member.is_new = False
            group.pending_sync.add(member.member_id)
        generation = group.generation
        group.sync_timer = self.timers.call_later(
            group.rebalance_timeout_ms, lambda: self.expire_pending_sync(group, generation)
        )

    def elect_joined_leader(self, group: Group) -> bool:
        leader = group.members.get(group.leader_id or "")
        if leader is not None and leader.awaiting_join:
            return True
        for member in group.members.values():
            if member.awaiting_join:
                group.leader_id = member.member_id
                return True
        return False

    def expire_pending_sync(self, group: Group, generation: int) -> None:
        if not self.current(group) or generation != group.generation or not group.pending_sync:
            return
        if group.state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            for member_id in list(group.pending_sync):
                member = group.remove(member_id)
                if member is not None:
                    cancel(member.heartbeat_timer)
                    if member.sync_callback is not None:
                        member.sync_callback(SyncResult(E.unknown_member_id))
                        member.sync_callback = None
            log.info("group %s: members did not sync in time", group.group_id)
            self.prepare_rebalance(group)

    def propagate_assignment_error(self, group: Group, code: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
            callback, member.sync_callback = member.sync_callback, None
            if callback is not None:
                callback(SyncResult(code))

    def remove_member_and_update_group(self, group: Group, member: Member) -> None:
        join_cb, sync_cb = member.join_callback, member.sync_callback
        member.join_callback = member.sync_callback = None
        if join_cb is not None:
            join_cb(JoinResult(E.unknown_member_id, member.member_id))
        if sync_cb is not None:
            sync_cb(SyncResult(E.unknown_member_id))
        cancel(member.heartbeat_timer)
        group.remove(member.member_id)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self.prepare_rebalance(group)
        elif group.state is GroupState.PREPARING_REBALANCE:
            self.maybe_complete_join(group)
