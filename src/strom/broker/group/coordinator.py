"""The classic group coordinator: Kafka's ``GroupCoordinator`` as a state machine.

Sans-IO. Three ports are injected: a :class:`~strom.clock.Clock`, :class:`Timers`
(``call_later(ms, fn)``; asyncio's loop in the broker, a fake driven by the fake clock in tests)
and ``append(partition, [(key, value)], done)``, which writes records to ``__consumer_offsets``
(raising if it cannot) and, for acks=-1 writes, calls ``done(code)`` once they are replicated
(see :mod:`~strom.broker.group.rebalance`). Every durable change goes through ``append``
*before* the in-memory state changes and before the response is given; :meth:`replay` rebuilds
the state from those records at start-up.

Membership follows Kafka's classic protocol: groups move Empty → PreparingRebalance →
CompletingRebalance → Stable (→ Dead when deleted). JoinGroup and SyncGroup answers may be
delayed (until every member rejoined, or the leader sent its assignment), so they are given to a
callback, as are OffsetCommit and TxnOffsetCommit (answered once their records are replicated);
Heartbeat, LeaveGroup and the other offset APIs answer at once.

Composed of parts with one job each, sharing one :class:`~strom.broker.group.rebalance.Rebalancer`
(``core``: the groups, their records, the rebalance transitions and timers):
:class:`~strom.broker.group.membership.Membership` (JoinGroup),
:class:`~strom.broker.group.offsets.Offsets` (offset commits, group deletion),
:class:`~strom.broker.group.consumer.ConsumerGroups` (KIP-848's ConsumerGroupHeartbeat, and the
conversions between the protocols) and
:class:`~strom.broker.group.consumer_classic.ClassicMembers` (the classic APIs on a KIP-848
group's classic members); this class adds loading from the log, SyncGroup, Heartbeat and
LeaveGroup, routes each classic API to the classic or the consumer group of that id, and is the
coordinator's whole public surface.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from strom.broker.group import consumer_records as cr
from strom.broker.group import records as rec
from strom.broker.group.consumer import ConsumerGroups
from strom.broker.group.consumer_classic import ClassicMembers
from strom.broker.group.consumer_model import ConsumerGroup
from strom.broker.group.membership import Membership
from strom.broker.group.model import (
    Group,
    GroupState,
    JoinCallback,
    JoinResult,
    Member,
    OffsetEntry,
    SyncCallback,
    SyncResult,
)
from strom.broker.group.offsets import Offsets, OffsetsCallback
from strom.broker.group.rebalance import (
    AppendFn,
    Cancellable,
    CoordinatorConfig,
    Rebalancer,
    Timers,
    TxnAppendFn,
    cancel,
)
from strom.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from strom.broker.group.topics_view import TopicsView
    from strom.clock import Clock

__all__ = ["AppendFn", "Cancellable", "CoordinatorConfig", "GroupCoordinator", "OffsetsCallback",
           "Timers"]
log = logging.getLogger(__name__)
E = ErrorCode


class GroupCoordinator:
    def __init__(self, config: CoordinatorConfig, clock: Clock, timers: Timers,
                 append: AppendFn, topics: TopicsView | None = None) -> None:  # fmt: skip
        self.core = Rebalancer(config, clock, timers, append)
        self.membership = Membership(self.core)
        self.consumer = ConsumerGroups(self.core, topics)
        self.classic_members = ClassicMembers(self.consumer)
        self.offsets = Offsets(self.core, self.consumer)
        # the parts' public operations are the coordinator's
        self.consumer_heartbeat = self.consumer.heartbeat
        self.check_offset_fetch = self.offsets.check_fetch
        self.commit_offsets = self.offsets.commit_offsets
        self.commit_txn_offsets = self.offsets.commit_txn_offsets
        self.replay_txn_offset = self.offsets.replay_txn_offset
        self.complete_txn = self.offsets.complete_txn
        self.has_pending_txn_offset = self.offsets.has_pending_txn_offset
        self.fetch_offsets = self.offsets.fetch_offsets
        self.delete_groups = self.offsets.delete_groups
        self.delete_offsets = self.offsets.delete_offsets
        self.expire_offsets = self.offsets.expire_offsets
        self.partition_for = self.core.partition_for
        self.not_here = self.core.not_here
        self.get_group = self.core.get_group

    # the core's state, as the broker and the handlers read it ----------------------------------
    @property
    def config(self) -> CoordinatorConfig:
        return self.core.config

    @property
    def groups(self) -> dict[str, Group]:
        return self.core.groups

    @property
    def loading(self) -> bool:
        return self.core.loading

    @loading.setter
    def loading(self, value: bool) -> None:
        self.core.loading = value

    @property
    def owned(self) -> set[int] | None:
        """The partitions of ``__consumer_offsets`` served here (None: all of them)."""
        return self.core.owned

    @owned.setter
    def owned(self, value: set[int] | None) -> None:
        self.core.owned = value

    @property
    def append_txn(self) -> TxnAppendFn | None:
        return self.core.append_txn

    @append_txn.setter
    def append_txn(self, value: TxnAppendFn | None) -> None:
        self.core.append_txn = value

    @property
    def pending_txn_offsets(self) -> dict[int, dict[tuple[str, str, int], OffsetEntry]]:
        return self.core.pending_txn_offsets

    @property
    def rebalances(self) -> int:
        return self.core.rebalances

    @property
    def completed_rebalances(self) -> int:
        return self.core.completed_rebalances

    # loading ---------------------------------------------------------------------------------
    def replay(self, key: bytes, value: bytes | None) -> None:
        """Apply one record of ``__consumer_offsets`` (in log order) while loading."""
        if cr.record_type(key) in cr.CONSUMER_RECORD_TYPES:
            self._replay_consumer(key, value)
            return
        k = rec.decode_key(key)
        if isinstance(k, rec.OffsetKey):
            offsets = self.core.loaded_offsets.setdefault(k.group, {})
            if value is None:
                offsets.pop((k.topic, k.partition), None)
            else:
                v = rec.decode_offset_value(value)
                offsets[(k.topic, k.partition)] = OffsetEntry(
                    v.offset, v.leader_epoch, v.metadata, v.commit_timestamp
                )
        else:
            self.core.loaded_meta[k.group] = None if value is None else rec.decode_group_value(value)
            if value is not None:
                self.core.loaded_kind[k.group] = "classic"

    def _replay_consumer(self, key: bytes, value: bytes | None) -> None:
        """A KIP-848 record while loading: replayed into the group staged for its id; the
        group record (or its tombstone) says the id is (no longer) a consumer group."""
        k = cr.decode_key(key)
        staged = self.core.loaded_consumer
        if k.kind == cr.GROUP_METADATA:
            if value is None:
                staged.pop(k.group, None)
                if self.core.loaded_kind.get(k.group) == "consumer":
                    del self.core.loaded_kind[k.group]
                return
            self.core.loaded_kind[k.group] = "consumer"
        group = staged.get(k.group)
        if group is None:
            group = staged[k.group] = ConsumerGroup(k.group)
        group.replay(k, value)

    def finish_loading(self, partition: int | None = None) -> None:
        """Build the groups replayed since loading began; with ``partition`` only that
        partition's (a marker replayed there may name other partitions' groups, which their
        own partition's log has), which this coordinator then owns."""
        core = self.core
        for gid in set(core.loaded_meta) | set(core.loaded_offsets) | set(core.loaded_consumer):
            if partition is not None and core.partition_for(gid) != partition:
                continue
            meta = core.loaded_meta.get(gid)
            offsets = core.loaded_offsets.get(gid) or {}
            consumer = core.loaded_consumer.get(gid) if core.loaded_kind.get(gid) == "consumer" else None
            if meta is None and not offsets and consumer is None:
                continue
            group = Group(gid, state_timestamp=core.clock.time_ms(), offsets=offsets)
            if consumer is not None:
                group.consumer = consumer
            elif meta is not None:
                group.generation = meta.generation
                group.protocol_type = meta.protocol_type or None
                group.protocol_name = meta.protocol
                group.state_timestamp = meta.current_state_timestamp
                for mv in meta.members:
                    group.add(
                        Member(
                            mv.member_id, mv.group_instance_id, mv.client_id, mv.client_host,
                            mv.rebalance_timeout, mv.session_timeout, group.protocol_type or "",
                            [(meta.protocol or "", mv.subscription)], mv.assignment,
                        )
                    )  # fmt: skip
                group.leader_id = meta.leader if meta.leader in group.members else group.leader_id
                group.state = GroupState.STABLE if group.members else GroupState.EMPTY
            core.groups[gid] = group
            for member in group.members.values():
                core.schedule_heartbeat(group, member)
            if group.consumer is not None:
                self.consumer.start_sessions(group.consumer)
        core.loaded_meta.clear()
        core.loaded_offsets.clear()
        core.loaded_consumer.clear()
        core.loaded_kind.clear()
        core.loading = False
        if partition is None:
            log.info("group coordinator loaded %d groups", len(core.groups))
        elif core.owned is not None:
            core.owned.add(partition)

    def unload_partition(self, partition: int) -> None:
        """This broker stopped leading ``partition``: forget its groups (timers cancelled,
        waiting JoinGroup/SyncGroup answered NOT_COORDINATOR, so their members find the new
        coordinator) and their pending transactional offsets (Kafka's onResignation)."""
        if self.core.owned is not None:
            self.core.owned.discard(partition)
        dropped = 0
        for gid, group in list(self.core.groups.items()):
            if self.core.partition_for(gid) != partition:
                continue
            for timer in (group.join_timer, group.sync_timer, *group.pending_members.values()):
                cancel(timer)
            if group.consumer is not None:
                self.consumer.cancel_all(group.consumer)
            for member in group.members.values():
                cancel(member.heartbeat_timer)
                join, member.join_callback = member.join_callback, None
                sync, member.sync_callback = member.sync_callback, None
                if join is not None:
                    join(JoinResult(E.not_coordinator, member.member_id))
                if sync is not None:
                    sync(SyncResult(E.not_coordinator))
            del self.core.groups[gid]
            dropped += 1
        for pid, pending in list(self.core.pending_txn_offsets.items()):
            for key in [k for k in pending if self.core.partition_for(k[0]) == partition]:
                del pending[key]
            if not pending:
                del self.core.pending_txn_offsets[pid]
        if dropped:
            log.info("group coordinator unloaded %d groups of partition %d", dropped, partition)

    # JoinGroup -------------------------------------------------------------------------------
    def join(
        self, group_id: str, member_id: str, instance_id: str | None, require_known_member_id: bool,
        client_id: str, client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int,
        protocol_type: str, protocols: list[tuple[str, bytes]], callback: JoinCallback,
    ) -> None:  # fmt: skip
        """JoinGroup: into a classic group (:mod:`~strom.broker.group.membership`), or as a
        classic member of a consumer group; an empty consumer group is replaced by a classic
        one first."""
        cfg = self.core.config
        entry = self.core.groups.get(group_id) if group_id else None
        if (entry is not None and entry.consumer is not None and self.core.not_here(group_id) is None
                and cfg.min_session_timeout_ms <= session_timeout_ms <= cfg.max_session_timeout_ms):  # fmt: skip
            if entry.consumer.members:
                return self.classic_members.join(
                    entry, member_id, instance_id, require_known_member_id, client_id,
                    client_host, rebalance_timeout_ms, session_timeout_ms, protocol_type,
                    protocols, callback)  # fmt: skip
            try:
                self.classic_members.retire_empty(entry)
            except Exception as exc:
                log.warning("group %s: replacing the empty consumer group failed: %s", group_id, exc)
                return callback(JoinResult(E.coordinator_not_available, member_id))
        return self.membership.join(group_id, member_id, instance_id, require_known_member_id,
                                    client_id, client_host, rebalance_timeout_ms,
                                    session_timeout_ms, protocol_type, protocols, callback)  # fmt: skip

    # SyncGroup -------------------------------------------------------------------------------
    def sync(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None,
        protocol_type: str | None, protocol_name: str | None, assignments: dict[str, bytes],
        callback: SyncCallback,
    ) -> None:  # fmt: skip
        def fail(code: ErrorCode) -> None:
            callback(SyncResult(code))

        if (code := self.core.not_here(group_id)) is not None:
            return fail(code)
        group = self.core.groups.get(group_id)
        if group is None:
            return fail(E.unknown_member_id)
        if group.consumer is not None:
            if not group.consumer.members:
                return fail(E.unknown_member_id)
            return self.classic_members.sync(group, generation, member_id, instance_id,
                                             protocol_type, protocol_name, callback)  # fmt: skip
        if group.state is GroupState.DEAD:
            return fail(E.coordinator_not_available)
        if group.is_static_member_fenced(instance_id, member_id):
            return fail(E.fenced_instance_id)
        member = group.members.get(member_id)
        if member is None:
            return fail(E.unknown_member_id)
        if generation != group.generation:
            return fail(E.illegal_generation)
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
            protocol_name is not None and protocol_name != group.protocol_name
        ):
            return fail(E.inconsistent_group_protocol)
        if group.state is GroupState.EMPTY:
            return fail(E.unknown_member_id)
        if group.state is GroupState.PREPARING_REBALANCE:
            return fail(E.rebalance_in_progress)
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            cancel(group.sync_timer)
        if group.state is GroupState.STABLE:
            self.core.schedule_heartbeat(group, member)
            return callback(
                SyncResult(E.none, group.protocol_type, group.protocol_name, member.assignment)
            )
        # CompletingRebalance
        if member.sync_callback is not None:
            member.sync_callback(SyncResult(E.rebalance_in_progress))
        member.sync_callback = callback
        if group.leader_id != member_id:
            return None
        full = {mid: assignments.get(mid, b"") for mid in group.members}
        self.core.store_group(group, lambda code: self._assignment_stored(group, generation, full, code),
                          full)  # fmt: skip
        return None

    def _assignment_stored(
        self, group: Group, generation: int, assignment: dict[str, bytes], code: ErrorCode
    ) -> None:
        """The leader's group record is replicated (or failed): the members waiting in SyncGroup
        get their assignment and the group is Stable, or they get the error and the group
        rebalances again (Kafka's resetAndPropagateAssignmentError). Ignored when the group
        moved on meanwhile (a member joined or left: a new rebalance answered them already)."""
        if (
            not self.core.current(group)
            or group.state is not GroupState.COMPLETING_REBALANCE
            or group.generation != generation
        ):
            return
        if code is not E.none:
            log.warning("group %s: storing the assignment of generation %d failed: %s",
                        group.group_id, generation, code.name)  # fmt: skip
            self.core.propagate_assignment_error(group, code)
            self.core.maybe_prepare_rebalance(group)
            return
        for m in group.members.values():
            m.assignment = assignment.get(m.member_id, b"")
            cb, m.sync_callback = m.sync_callback, None
            if cb is not None:
                cb(SyncResult(E.none, group.protocol_type, group.protocol_name, m.assignment))
                self.core.schedule_heartbeat(group, m)
        self.core.transition(group, GroupState.STABLE)

    # Heartbeat / LeaveGroup ------------------------------------------------------------------
    def heartbeat(
        self, group_id: str, member_id: str, instance_id: str | None, generation: int
    ) -> ErrorCode:
        if (code := self.core.not_here(group_id)) is not None:
            return code
        group = self.core.groups.get(group_id)
        if group is None:
            return E.unknown_member_id
        if group.consumer is not None:
            return self.classic_members.heartbeat(group, member_id, instance_id, generation)
        if group.state is GroupState.DEAD:
            return E.coordinator_not_available
        if group.is_static_member_fenced(instance_id, member_id):
            return E.fenced_instance_id
        member = group.members.get(member_id)
        if member is None:
            return E.unknown_member_id
        if generation != group.generation:
            return E.illegal_generation
        if group.state is GroupState.EMPTY:
            return E.unknown_member_id
        self.core.schedule_heartbeat(group, member)
        if group.state is GroupState.PREPARING_REBALANCE:
            return E.rebalance_in_progress
        return E.none

    def leave(
        self, group_id: str, leaving: list[tuple[str, str | None]]
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        if (code := self.core.not_here(group_id)) is not None:
            return code, [code] * len(leaving)
        group = self.core.groups.get(group_id)
        if group is None:
            return E.none, [E.unknown_member_id] * len(leaving)
        if group.consumer is not None:
            return E.none, self.classic_members.leave(group, leaving)
        if group.state is GroupState.DEAD:
            return E.coordinator_not_available, [E.coordinator_not_available] * len(leaving)
        errors = []
        for member_id, instance_id in leaving:
            if member_id == "" and instance_id is not None and instance_id in group.static_members:
                member_id = group.static_members[instance_id]
            if member_id in group.pending_members:
                cancel(group.pending_members.pop(member_id))
                self.core.maybe_complete_join(group)
                errors.append(E.none)
            elif group.is_static_member_fenced(instance_id, member_id):
                errors.append(E.fenced_instance_id)
            elif member_id not in group.members:
                errors.append(E.unknown_member_id)
            else:
                log.info("group %s: member %s left", group_id, member_id)
                self.core.remove_member_and_update_group(group, group.members[member_id])
                errors.append(E.none)
        return E.none, errors
