"""JoinGroup: how a member enters a group (Kafka's classic protocol).

A new member without an id is given one; with ``require_known_member_id`` (JoinGroup v4+) it is
first answered MEMBER_ID_REQUIRED and kept as *pending* for a session timeout, until it joins
again with that id. A static member (``group.instance.id``) coming back with a new id takes
over the old member's place and fences the old id (FENCED_INSTANCE_ID); in a Stable group whose
protocol is unchanged that needs no rebalance, only a stored group record (reverted if the
write fails). A known member rejoining triggers a rebalance when it is the leader or its
protocols changed; otherwise it gets the current generation back. Answers may be delayed until
the join completes (:mod:`~strom.broker.group.rebalance`), so they go to a callback.
"""

from __future__ import annotations

import logging
import uuid

from strom.broker.group.model import Group, GroupState, JoinCallback, JoinResult, Member, SyncResult
from strom.broker.group.rebalance import Rebalancer, cancel
from strom.protocol.errors import ErrorCode

log = logging.getLogger(__name__)
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000
E = ErrorCode


class Membership:
    """JoinGroup: members joining, rejoining, static members replaced, on the groups of
    ``core``."""

    def __init__(self, core: Rebalancer) -> None:
        self.core = core

    # JoinGroup -------------------------------------------------------------------------------
    def join(
        self, group_id: str, member_id: str, instance_id: str | None, require_known_member_id: bool,
        client_id: str, client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int,
        protocol_type: str, protocols: list[tuple[str, bytes]], callback: JoinCallback,
    ) -> None:  # fmt: skip
        def fail(code: ErrorCode) -> None:
            callback(JoinResult(code, member_id))

        cfg = self.core.config
        if not group_id:
            return fail(E.invalid_group_id)
        if (code := self.core.not_here(group_id)) is not None:
            return fail(code)
        if not cfg.min_session_timeout_ms <= session_timeout_ms <= cfg.max_session_timeout_ms:
            return fail(E.invalid_session_timeout)
        group = self.core.groups.get(group_id)
        if group is None:
            if member_id:
                return fail(E.unknown_member_id)
            group = self.core.groups[group_id] = Group(group_id, state_timestamp=self.core.clock.time_ms())
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
                group.pending_members[new_id] = self.core.timers.call_later(
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
                callback(self.core.join_result(group, member_id))
            else:
                self._update_member_and_rebalance(group, member, *args[2:4], protocols, callback)
        elif state is GroupState.STABLE:
            if group.leader_id == member_id or not member.matches(protocols):
                self._update_member_and_rebalance(group, member, *args[2:4], protocols, callback)
            else:
                result = self.core.join_result(group, member_id)
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
        self.core.schedule_heartbeat(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        cancel(group.pending_members.pop(member_id, None))
        self.core.maybe_prepare_rebalance(group)
        self.core.maybe_complete_join(group)

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
        self.core.maybe_prepare_rebalance(group)
        self.core.maybe_complete_join(group)

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
        self.core.schedule_heartbeat(group, member)
        log.info(
            "group %s: static member %s replaced %s by %s",
            group.group_id,
            instance_id,
            old_id,
            new_id,
        )
        if group.state is GroupState.STABLE:
            if group.protocol_name == group.select_protocol():

                def stored(code: ErrorCode) -> None:
                    if code is E.none:
                        callback(self.core.join_result(group, new_id, skip=group.leader_id == new_id))
                        return
                    log.warning("group %s: storing static member failed: %s",
                                group.group_id, code.name)  # fmt: skip
                    if self.core.current(group) and group.members.get(new_id) is member:
                        # revert: the old member id stays valid (Kafka's replaceStaticMember)
                        member.protocols = old_protocols
                        del group.members[new_id]
                        member.member_id = old_id
                        group.members[old_id] = member
                        group.static_members[instance_id] = old_id
                        if group.leader_id == new_id:
                            group.leader_id = old_id
                    callback(JoinResult(code, ""))

                self.core.store_group(group, stored)
            else:
                member.join_callback = callback
                self.core.prepare_rebalance(group)
        elif group.state is GroupState.COMPLETING_REBALANCE:
            member.join_callback = callback
            self.core.prepare_rebalance(group)
        else:  # PreparingRebalance: answered when the join completes
            member.join_callback = callback
            self.core.maybe_complete_join(group)

    def _expire_pending_member(self, group: Group, member_id: str) -> None:
        if self.core.current(group) and group.pending_members.pop(member_id, None) is not None:
            self.core.maybe_complete_join(group)
