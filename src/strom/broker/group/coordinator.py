"""The classic group coordinator: Kafka's ``GroupCoordinator`` as a state machine.

Sans-IO. Three ports are injected: a :class:`~strom.clock.Clock`, :class:`Timers`
(``call_later(ms, fn)``; asyncio's loop in the broker, a fake driven by the fake clock in tests)
and ``append(partition, [(key, value)])``, which writes records to ``__consumer_offsets``
synchronously and raises if it cannot. Every durable change goes through ``append`` *before* the
in-memory state changes and before the response is given; :meth:`replay` rebuilds the state from
those records at start-up.

Membership follows Kafka's classic protocol: groups move Empty → PreparingRebalance →
CompletingRebalance → Stable (→ Dead when deleted). JoinGroup and SyncGroup answers may be
delayed (until every member rejoined, or the leader sent its assignment), so they are given to a
callback; Heartbeat, LeaveGroup and the offset APIs answer at once. Offset commits live in
:mod:`strom.broker.group.offsets`.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from strom.broker.group import records as rec
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
from strom.broker.group.offsets import OffsetOps
from strom.clock import Clock
from strom.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000
E = ErrorCode


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class Timers(Protocol):
    def call_later(self, delay_ms: int, fn: Callable[[], None]) -> Cancellable: ...


AppendFn = Callable[[int, list[tuple[bytes, bytes | None]]], None]


@dataclass(frozen=True, slots=True)
class CoordinatorConfig:
    offsets_partitions: int = 50
    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    max_group_size: int = 2**31 - 1
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offset_metadata_max_bytes: int = 4096


def _cancel(timer: Any) -> None:
    if timer is not None:
        timer.cancel()


class GroupCoordinator(OffsetOps):
    def __init__(self, config: CoordinatorConfig, clock: Clock, timers: Timers, append: AppendFn):
        self.config = config
        self.clock = clock
        self.timers = timers
        self._append = append
        self.groups: dict[str, Group] = {}
        self.loading = True
        self._loaded_meta: dict[str, rec.GroupValue | None] = {}
        self._loaded_offsets: dict[str, dict[tuple[str, int], OffsetEntry]] = {}

    # persistence -----------------------------------------------------------------------------
    def partition_for(self, group_id: str) -> int:
        return rec.partition_for(group_id, self.config.offsets_partitions)

    def append(self, group_id: str, records: list[tuple[bytes, bytes | None]]) -> None:
        if records:
            self._append(self.partition_for(group_id), records)

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

    def _store_group(self, group: Group, assignment: dict[str, bytes] | None = None) -> None:
        self.append(group.group_id, [self.group_record(group, assignment)])

    def replay(self, key: bytes, value: bytes | None) -> None:
        """Apply one record of ``__consumer_offsets`` (in log order) while loading."""
        k = rec.decode_key(key)
        if isinstance(k, rec.OffsetKey):
            offsets = self._loaded_offsets.setdefault(k.group, {})
            if value is None:
                offsets.pop((k.topic, k.partition), None)
            else:
                v = rec.decode_offset_value(value)
                offsets[(k.topic, k.partition)] = OffsetEntry(
                    v.offset, v.leader_epoch, v.metadata, v.commit_timestamp
                )
        else:
            self._loaded_meta[k.group] = None if value is None else rec.decode_group_value(value)

    def finish_loading(self) -> None:
        for gid in set(self._loaded_meta) | set(self._loaded_offsets):
            meta = self._loaded_meta.get(gid)
            offsets = self._loaded_offsets.get(gid) or {}
            if meta is None and not offsets:
                continue
            group = Group(gid, state_timestamp=self.clock.time_ms(), offsets=offsets)
            if meta is not None:
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
            self.groups[gid] = group
            for member in group.members.values():
                self._schedule_heartbeat(group, member)
        self._loaded_meta.clear()
        self._loaded_offsets.clear()
        self.loading = False
        log.info("group coordinator loaded %d groups", len(self.groups))

    # helpers ---------------------------------------------------------------------------------
    def _current(self, group: Group) -> bool:
        return self.groups.get(group.group_id) is group

    def _transition(self, group: Group, state: GroupState) -> None:
        group.state = state
        group.state_timestamp = self.clock.time_ms()

    def _schedule_heartbeat(
        self, group: Group, member: Member, timeout_ms: int | None = None
    ) -> None:
        _cancel(member.heartbeat_timer)
        delay = member.session_timeout_ms if timeout_ms is None else timeout_ms
        member.heartbeat_timer = self.timers.call_later(
            delay, lambda: self._on_heartbeat_expired(group, member)
        )

    def _on_heartbeat_expired(self, group: Group, member: Member) -> None:
        if not self._current(group) or group.members.get(member.member_id) is not member:
            return
        if member.is_new or not (member.awaiting_join or member.awaiting_sync):
            log.info("group %s: member %s session expired", group.group_id, member.member_id)
            self._remove_member_and_update_group(group, member)

    def _member_list(self, group: Group) -> list[tuple[str, str | None, bytes]]:
        return [
            (m.member_id, m.instance_id, m.metadata(group.protocol_name))
            for m in group.members.values()
        ]

    def _join_result(self, group: Group, member_id: str, *, skip: bool = False) -> JoinResult:
        leader = group.leader_id == member_id
        return JoinResult(
            E.none, member_id, group.generation, group.protocol_type, group.protocol_name,
            group.leader_id or "", skip, self._member_list(group) if leader else [],
        )  # fmt: skip

    def get_group(self, group_id: str) -> Group | None:
        if self.loading:
            raise KafkaError(E.coordinator_load_in_progress)
        return self.groups.get(group_id)

    # JoinGroup -------------------------------------------------------------------------------
    def join(
        self, group_id: str, member_id: str, instance_id: str | None, require_known_member_id: bool,
        client_id: str, client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int,
        protocol_type: str, protocols: list[tuple[str, bytes]], callback: JoinCallback,
    ) -> None:  # fmt: skip
        def fail(code: ErrorCode) -> None:
            callback(JoinResult(code, member_id))

        cfg = self.config
        if not group_id:
            return fail(E.invalid_group_id)
        if self.loading:
            return fail(E.coordinator_load_in_progress)
        if not cfg.min_session_timeout_ms <= session_timeout_ms <= cfg.max_session_timeout_ms:
            return fail(E.invalid_session_timeout)
        group = self.groups.get(group_id)
        if group is None:
            if member_id:
                return fail(E.unknown_member_id)
            group = self.groups[group_id] = Group(group_id, state_timestamp=self.clock.time_ms())
        if member_id == "" and len(group.members) >= cfg.max_group_size:
            return fail(E.group_max_size_reached)
        if group.state is GroupState.DEAD:
            return fail(E.coordinator_not_available)
        if not group.supports_protocols(protocol_type, protocols):
            return fail(E.inconsistent_group_protocol)
        args = (
            client_id,
            client_host,
            rebalance_timeout_ms,
            session_timeout_ms,
            protocol_type,
            protocols,
        )
        if member_id == "":
            new_id = f"{client_id}-{uuid.uuid4()}"
            if instance_id is not None:
                old_id = group.static_members.get(instance_id)
                if old_id is None:
                    self._add_member_and_rebalance(group, new_id, instance_id, *args, callback)
                else:
                    self._replace_static_member(group, old_id, new_id, instance_id, *args, callback)
            elif require_known_member_id:
                group.pending_members[new_id] = self.timers.call_later(
                    session_timeout_ms, lambda: self._expire_pending_member(group, new_id)
                )
                callback(JoinResult(E.member_id_required, new_id))
            else:
                self._add_member_and_rebalance(group, new_id, None, *args, callback)
            return None
        if member_id in group.pending_members:
            return self._add_member_and_rebalance(group, member_id, instance_id, *args, callback)
        if group.is_static_member_fenced(instance_id, member_id):
            return fail(E.fenced_instance_id)
        member = group.members.get(member_id)
        if member is None or (instance_id is not None and instance_id not in group.static_members):
            return fail(E.unknown_member_id)
        state = group.state
        if state is GroupState.PREPARING_REBALANCE:
            self._update_member_and_rebalance(group, member, *args[2:4], protocols, callback)
        elif state is GroupState.COMPLETING_REBALANCE:
            if member.matches(protocols):
                callback(self._join_result(group, member_id))
            else:
                self._update_member_and_rebalance(group, member, *args[2:4], protocols, callback)
        elif state is GroupState.STABLE:
            if group.leader_id == member_id or not member.matches(protocols):
                self._update_member_and_rebalance(group, member, *args[2:4], protocols, callback)
            else:
                result = self._join_result(group, member_id)
                result.members = []
                callback(result)
        else:
            fail(E.unknown_member_id)
        return None

    def _add_member_and_rebalance(
        self, group: Group, member_id: str, instance_id: str | None, client_id: str,
        client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int,
        protocol_type: str, protocols: list[tuple[str, bytes]], callback: JoinCallback,
    ) -> None:  # fmt: skip
        member = Member(
            member_id, instance_id, client_id, client_host, rebalance_timeout_ms,
            session_timeout_ms, protocol_type, protocols, join_callback=callback, is_new=True,
        )  # fmt: skip
        if group.state is GroupState.PREPARING_REBALANCE and group.generation == 0:
            group.new_member_added = True
        group.add(member)
        self._schedule_heartbeat(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        _cancel(group.pending_members.pop(member_id, None))
        self._maybe_prepare_rebalance(group)
        self._maybe_complete_join(group)

    def _update_member_and_rebalance(
        self, group: Group, member: Member, rebalance_timeout_ms: int, session_timeout_ms: int,
        protocols: list[tuple[str, bytes]], callback: JoinCallback,
    ) -> None:  # fmt: skip
        if member.join_callback is not None:  # a retry from another connection
            member.join_callback(JoinResult(E.rebalance_in_progress, member.member_id))
        member.protocols = protocols
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        member.join_callback = callback
        self._maybe_prepare_rebalance(group)
        self._maybe_complete_join(group)

    def _replace_static_member(
        self, group: Group, old_id: str, new_id: str, instance_id: str, client_id: str,
        client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int,
        protocol_type: str, protocols: list[tuple[str, bytes]], callback: JoinCallback,
    ) -> None:  # fmt: skip
        """A static member came back with a new member id: fence the old one, keep its place."""
        member = group.members.pop(old_id)
        old_join, old_sync = member.join_callback, member.sync_callback
        member.join_callback = member.sync_callback = None
        if old_join is not None:
            old_join(JoinResult(E.fenced_instance_id, old_id))
        if old_sync is not None:
            old_sync(SyncResult(E.fenced_instance_id))
        member.member_id = new_id
        group.members[new_id] = member
        if group.leader_id == old_id:
            group.leader_id = new_id
        group.static_members[instance_id] = new_id
        if old_id in group.pending_sync:
            group.pending_sync.discard(old_id)
            group.pending_sync.add(new_id)
        old_protocols = member.protocols
        member.protocols = protocols
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        member.client_host = client_host
        self._schedule_heartbeat(group, member)
        log.info(
            "group %s: static member %s replaced %s by %s",
            group.group_id,
            instance_id,
            old_id,
            new_id,
        )
        if group.state is GroupState.STABLE:
            if group.protocol_name == group.select_protocol():
                try:
                    self._store_group(group)
                except Exception as exc:  # revert: the old member id stays valid
                    log.warning("group %s: storing static member failed: %s", group.group_id, exc)
                    member.protocols = old_protocols
                    del group.members[new_id]
                    member.member_id = old_id
                    group.members[old_id] = member
                    group.static_members[instance_id] = old_id
                    if group.leader_id == new_id:
                        group.leader_id = old_id
                    callback(JoinResult(E.coordinator_not_available, ""))
                    return
                callback(self._join_result(group, new_id, skip=group.leader_id == new_id))
            else:
                member.join_callback = callback
                self._prepare_rebalance(group)
        elif group.state is GroupState.COMPLETING_REBALANCE:
            member.join_callback = callback
            self._prepare_rebalance(group)
        else:  # PreparingRebalance: answered when the join completes
            member.join_callback = callback
            self._maybe_complete_join(group)

    def _expire_pending_member(self, group: Group, member_id: str) -> None:
        if self._current(group) and group.pending_members.pop(member_id, None) is not None:
            self._maybe_complete_join(group)

    # rebalance -------------------------------------------------------------------------------
    def _maybe_prepare_rebalance(self, group: Group) -> None:
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY):
            self._prepare_rebalance(group)

    def _prepare_rebalance(self, group: Group) -> None:
        if group.state is GroupState.COMPLETING_REBALANCE:
            self._propagate_assignment_error(group, E.rebalance_in_progress)
        _cancel(group.sync_timer)
        _cancel(group.join_timer)
        if group.state is GroupState.EMPTY:
            delay = self.config.initial_rebalance_delay_ms
            group.initial_delay_active = True
            group.initial_delay_remaining_ms = max(group.rebalance_timeout_ms - delay, 0)
            group.join_timer = self.timers.call_later(delay, lambda: self._on_initial_delay(group))
        else:
            group.initial_delay_active = False
            group.join_timer = self.timers.call_later(
                group.rebalance_timeout_ms, lambda: self._complete_join(group)
            )
        self._transition(group, GroupState.PREPARING_REBALANCE)
        log.info("group %s: preparing rebalance (generation %d)", group.group_id, group.generation)
        self._maybe_complete_join(group)

    def _on_initial_delay(self, group: Group) -> None:
        if not self._current(group) or not group.initial_delay_active:
            return
        if group.new_member_added and group.initial_delay_remaining_ms > 0:
            group.new_member_added = False
            delay = min(self.config.initial_rebalance_delay_ms, group.initial_delay_remaining_ms)
            group.initial_delay_remaining_ms = max(group.initial_delay_remaining_ms - delay, 0)
            group.join_timer = self.timers.call_later(delay, lambda: self._on_initial_delay(group))
        else:
            self._complete_join(group)

    def _maybe_complete_join(self, group: Group) -> None:
        if (
            group.state is GroupState.PREPARING_REBALANCE
            and not group.initial_delay_active
            and group.has_all_members_joined()
        ):
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        if not self._current(group) or group.state is not GroupState.PREPARING_REBALANCE:
            return
        _cancel(group.join_timer)
        group.join_timer = None
        group.initial_delay_active = False
        for member in list(group.members.values()):
            if not member.awaiting_join and member.instance_id is None:
                log.info("group %s: member %s did not rejoin", group.group_id, member.member_id)
                _cancel(member.heartbeat_timer)
                group.remove(member.member_id)
        if not self._elect_joined_leader(group) and group.members:
            group.join_timer = self.timers.call_later(
                group.rebalance_timeout_ms, lambda: self._complete_join(group)
            )
            return
        group.generation += 1
        group.pending_sync.clear()
        if not group.members:
            group.protocol_name = None
            self._transition(group, GroupState.EMPTY)
            try:
                self._store_group(group)
            except Exception as exc:
                log.warning("group %s: storing empty generation failed: %s", group.group_id, exc)
            log.info("group %s: generation %d is empty", group.group_id, group.generation)
            return
        group.protocol_name = group.select_protocol()
        self._transition(group, GroupState.COMPLETING_REBALANCE)
        log.info(
            "group %s: generation %d with %d members, protocol %s, leader %s",
            group.group_id, group.generation, len(group.members), group.protocol_name, group.leader_id,
        )  # fmt: skip
        for member in list(group.members.values()):
            callback, member.join_callback = member.join_callback, None
            if callback is not None:
                callback(self._join_result(group, member.member_id))
            self._schedule_heartbeat(group, member)
            member.is_new = False
            group.pending_sync.add(member.member_id)
        generation = group.generation
        group.sync_timer = self.timers.call_later(
            group.rebalance_timeout_ms, lambda: self._expire_pending_sync(group, generation)
        )

    def _elect_joined_leader(self, group: Group) -> bool:
        leader = group.members.get(group.leader_id or "")
        if leader is not None and leader.awaiting_join:
            return True
        for member in group.members.values():
            if member.awaiting_join:
                group.leader_id = member.member_id
                return True
        return False

    def _expire_pending_sync(self, group: Group, generation: int) -> None:
        if not self._current(group) or generation != group.generation or not group.pending_sync:
            return
        if group.state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            for member_id in list(group.pending_sync):
                member = group.remove(member_id)
                if member is not None:
                    _cancel(member.heartbeat_timer)
                    if member.sync_callback is not None:
                        member.sync_callback(SyncResult(E.unknown_member_id))
                        member.sync_callback = None
            log.info("group %s: members did not sync in time", group.group_id)
            self._prepare_rebalance(group)

    def _propagate_assignment_error(self, group: Group, code: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
            callback, member.sync_callback = member.sync_callback, None
            if callback is not None:
                callback(SyncResult(code))

    def _remove_member_and_update_group(self, group: Group, member: Member) -> None:
        join_cb, sync_cb = member.join_callback, member.sync_callback
        member.join_callback = member.sync_callback = None
        if join_cb is not None:
            join_cb(JoinResult(E.unknown_member_id, member.member_id))
        if sync_cb is not None:
            sync_cb(SyncResult(E.unknown_member_id))
        _cancel(member.heartbeat_timer)
        group.remove(member.member_id)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group)
        elif group.state is GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(group)

    # SyncGroup -------------------------------------------------------------------------------
    def sync(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None,
        protocol_type: str | None, protocol_name: str | None, assignments: dict[str, bytes],
        callback: SyncCallback,
    ) -> None:  # fmt: skip
        def fail(code: ErrorCode) -> None:
            callback(SyncResult(code))

        if self.loading:
            return fail(E.coordinator_load_in_progress)
        group = self.groups.get(group_id)
        if group is None:
            return fail(E.unknown_member_id)
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
            _cancel(group.sync_timer)
        if group.state is GroupState.STABLE:
            self._schedule_heartbeat(group, member)
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
        try:
            self._store_group(group, full)
        except Exception as exc:
            log.warning("group %s: storing the assignment failed: %s", group.group_id, exc)
            self._propagate_assignment_error(group, E.coordinator_not_available)
            self._maybe_prepare_rebalance(group)
            return None
        for m in group.members.values():
            m.assignment = full[m.member_id]
            cb, m.sync_callback = m.sync_callback, None
            if cb is not None:
                cb(SyncResult(E.none, group.protocol_type, group.protocol_name, m.assignment))
                self._schedule_heartbeat(group, m)
        self._transition(group, GroupState.STABLE)
        return None

    # Heartbeat / LeaveGroup ------------------------------------------------------------------
    def heartbeat(
        self, group_id: str, member_id: str, instance_id: str | None, generation: int
    ) -> ErrorCode:
        if self.loading:
            return E.coordinator_load_in_progress
        group = self.groups.get(group_id)
        if group is None:
            return E.unknown_member_id
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
        self._schedule_heartbeat(group, member)
        if group.state is GroupState.PREPARING_REBALANCE:
            return E.rebalance_in_progress
        return E.none

    def leave(
        self, group_id: str, leaving: list[tuple[str, str | None]]
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        if self.loading:
            return E.coordinator_load_in_progress, [E.coordinator_load_in_progress] * len(leaving)
        group = self.groups.get(group_id)
        if group is None:
            return E.none, [E.unknown_member_id] * len(leaving)
        if group.state is GroupState.DEAD:
            return E.coordinator_not_available, [E.coordinator_not_available] * len(leaving)
        errors = []
        for member_id, instance_id in leaving:
            if member_id == "" and instance_id is not None and instance_id in group.static_members:
                member_id = group.static_members[instance_id]
            if member_id in group.pending_members:
                _cancel(group.pending_members.pop(member_id))
                self._maybe_complete_join(group)
                errors.append(E.none)
            elif group.is_static_member_fenced(instance_id, member_id):
                errors.append(E.fenced_instance_id)
            elif member_id not in group.members:
                errors.append(E.unknown_member_id)
            else:
                log.info("group %s: member %s left", group_id, member_id)
                self._remove_member_and_update_group(group, group.members[member_id])
                errors.append(E.none)
        return E.none, errors
