"""Classic members inside a KIP-848 consumer group (a rolling upgrade of the clients).

During an upgrade a group mixes members on both protocols: Kafka 4 keeps one consumer group
and lets the classic members in through JoinGroup / SyncGroup / Heartbeat / LeaveGroup, each a
member of the consumer group like the others (Kafka's ``classicGroup*ToConsumerGroup``):

- JoinGroup: the member's ``ConsumerProtocolSubscription`` (topics, owned partitions, rack)
  is its subscription; it takes its reconciliation step as a consumer-protocol member would,
  and gets its member epoch as the generation, protocol type ``consumer`` and its own first
  protocol name, no leader (nobody assigns: the server-side assignor did). It must SyncGroup
  within its rebalance timeout.
- SyncGroup: its assigned partitions (only those free already: partitions another member
  still has to revoke come at a later generation), as a ``ConsumerProtocolAssignment`` in the
  version of its subscription.
- Heartbeat: REBALANCE_IN_PROGRESS when it must rejoin to move on (the group epoch moved past
  it, it must revoke partitions, or partitions it waited for are free now); it must then
  rejoin within its rebalance timeout.
- LeaveGroup: the members leave; the group epoch is bumped.

A JoinGroup to an *empty* consumer group replaces it with a classic group (the offsets stay):
Kafka's conversions of empty groups are always allowed.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import replace

from strom.broker.group import consumer_records as cr
from strom.broker.group.consumer import JOIN, SESSION, SYNC, ConsumerGroups, write_error
from strom.broker.group.consumer_model import ConsumerGroup, ConsumerMember, MemberState
from strom.broker.group.embedded_protocol import (
    EmbeddedProtocolError,
    encode_assignment,
    parse_subscription,
    version_of,
)
from strom.broker.group.model import Group, JoinCallback, JoinResult, SyncCallback, SyncResult
from strom.broker.group.rebalance import cancel
from strom.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)
E = ErrorCode


class ClassicMembers:
    """The classic group APIs on consumer groups (module doc)."""

    def __init__(self, consumer: ConsumerGroups) -> None:
        self.consumer = consumer
        self.core = consumer.core

    def retire_empty(self, entry: Group) -> None:
        """An empty consumer group is replaced by a classic one (tombstones written
        leader-local, raising if they cannot be)."""
        group = entry.consumer
        assert group is not None and not group.members
        self.core.append(entry.group_id, list(group.tombstones()))
        self.consumer.cancel_all(group)
        entry.consumer = None
        log.info("group %s: empty consumer group replaced by a classic group", entry.group_id)

    def _member(self, group: ConsumerGroup, member_id: str, instance_id: str | None) -> ConsumerMember:
        """Kafka's validateConsumerGroupMember, and the member must be a classic one."""
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                raise KafkaError(E.unknown_member_id,
                                 f"Member {member_id} is not a member of group {group.group_id}.")  # fmt: skip
        else:
            member = group.static_member(instance_id)
            if member is None:
                raise KafkaError(E.unknown_member_id,
                                 f"Member with instance id {instance_id} is not a member of "
                                 f"group {group.group_id}.")  # fmt: skip
            if member.member_id != member_id:
                raise KafkaError(E.fenced_instance_id)
        if not member.uses_classic:
            raise KafkaError(E.unknown_member_id,
                             f"Member {member.member_id} does not use the classic protocol.")  # fmt: skip
        return member

    # JoinGroup -----------------------------------------------------------------------------
    def join(
        self, entry: Group, member_id: str, instance_id: str | None, require_known_member_id: bool,
        client_id: str, client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int,
        protocol_type: str, protocols: list[tuple[str, bytes]], callback: JoinCallback,
    ) -> None:  # fmt: skip
        group = entry.consumer
        assert group is not None
        gid = entry.group_id
        try:
            self._join(group, member_id, instance_id, require_known_member_id, client_id,
                       client_host, rebalance_timeout_ms, session_timeout_ms, protocol_type,
                       protocols, callback)  # fmt: skip
        except KafkaError as exc:
            log.debug("group %s: classic join of %s refused: %s", gid, member_id, exc)
            callback(JoinResult(exc.error_code, member_id))

    def _join(
        self, group: ConsumerGroup, member_id: str, instance_id: str | None,
        require_known_member_id: bool, client_id: str, client_host: str, rebalance_timeout_ms: int,
        session_timeout_ms: int, protocol_type: str, protocols: list[tuple[str, bytes]],
        callback: JoinCallback,
    ) -> None:  # fmt: skip
        cfg = self.core.config
        gid = group.group_id
        unknown = member_id == ""
        if unknown:
            member_id = str(uuid.uuid4())
        if len(group.members) >= cfg.consumer_max_size and member_id not in group.members:
            raise KafkaError(E.group_max_size_reached)
        if not self._supports(group, protocol_type, protocols):
            raise KafkaError(E.inconsistent_group_protocol)
        if unknown and require_known_member_id and instance_id is None:
            callback(JoinResult(E.member_id_required, member_id))
            return
        try:
            subscription = parse_subscription(protocols[0][1])
        except EmbeddedProtocolError:
            raise KafkaError(E.inconsistent_group_protocol) from None
        records: list[tuple[bytes, bytes | None]] = []
        replaced: str | None = None
        existing = group.static_member(instance_id)
        if instance_id is not None and existing is not None and existing.member_id != member_id:
            if not unknown:
                raise KafkaError(E.fenced_instance_id)
            member = replace(existing, member_id=member_id, member_epoch=0, previous_member_epoch=0)
            replaced = existing.member_id
            records.extend(self.consumer.member_tombstones(gid, replaced))
            records.append((cr.member_key(cr.MEMBER_METADATA, gid, member_id),
                            cr.member_value(member.metadata())))  # fmt: skip
            records.append((cr.member_key(cr.TARGET_ASSIGNMENT_MEMBER, gid, member_id),
                            cr.target_member_value(group.target.get(replaced, {}))))  # fmt: skip
            records.append((cr.member_key(cr.CURRENT_MEMBER_ASSIGNMENT, gid, member_id),
                            cr.current_assignment_value(member.current())))  # fmt: skip
        else:
            member = group.members.get(member_id) or ConsumerMember(member_id)
            if member_id not in group.members:
                log.info("group %s: member %s joins (classic protocol)", gid, member_id)
        updated = replace(
            member, instance_id=instance_id if instance_id is not None else member.instance_id,
            rack_id=subscription.rack_id if subscription.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=(rebalance_timeout_ms if rebalance_timeout_ms != -1
                                  else member.rebalance_timeout_ms),
            subscribed_topic_names=tuple(subscription.topics), client_id=client_id,
            client_host=client_host,
            classic=cr.ClassicMetadata(session_timeout_ms, tuple(protocols)),
        )  # fmt: skip
        owned = self.consumer.ids_of(subscription.owned)
        reconciled = self.consumer.update_member(group, member, updated, replaced, owned, records)
        protocol_name = protocols[0][0]
        result = JoinResult(E.none, member_id, reconciled.member_epoch, "consumer", protocol_name,
                            "")  # fmt: skip

        def written() -> None:
            installed = self.consumer.install(gid, group, records)
            if replaced is not None:
                self.consumer.cancel_timers(installed, replaced)
            cancel(installed.timers.get(member_id, {}).pop(JOIN, None))
            self.consumer.schedule(installed, member_id, SESSION, session_timeout_ms)
            self.consumer.schedule(installed, member_id, SYNC, rebalance_timeout_ms)

        def done(code: ErrorCode) -> None:
            callback(result if code is E.none else JoinResult(write_error(code), member_id))

        self.core.append_replayed(gid, records, written, done)

    @staticmethod
    def _supports(group: ConsumerGroup, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """Kafka's supportsClassicProtocols: type ``consumer``, and a protocol every classic
        member supports (any, when none is classic)."""
        if protocol_type != "consumer" or not protocols:
            return False
        classic = [m for m in group.members.values() if m.classic is not None]
        if not classic:
            return True
        names = {n for n, _ in protocols}
        for m in classic:
            assert m.classic is not None
            names &= {n for n, _ in m.classic.protocols}
        return bool(names)

    # SyncGroup -----------------------------------------------------------------------------
    def sync(self, entry: Group, generation: int, member_id: str, instance_id: str | None,
             protocol_type: str | None, protocol_name: str | None, callback: SyncCallback) -> None:  # fmt: skip
        group = entry.consumer
        assert group is not None
        try:
            member = self._member(group, member_id, instance_id)
            assert member.classic is not None
            if generation != member.member_epoch:
                raise KafkaError(E.illegal_generation)
            own_protocol, metadata = member.classic.protocols[0]
            if (protocol_type is not None and protocol_type != "consumer") or (
                    protocol_name is not None and protocol_name != own_protocol):  # fmt: skip
                raise KafkaError(E.inconsistent_group_protocol)
            self._throw_if_rebalancing(group, member)
        except KafkaError as exc:
            return callback(SyncResult(exc.error_code))
        cancel(group.timers.get(member.member_id, {}).pop(SYNC, None))
        self.consumer.schedule(group, member.member_id, SESSION, member.classic.session_timeout_ms)
        assignment = encode_assignment(self.consumer.names_of(member.assigned), version_of(metadata))
        return callback(SyncResult(E.none, "consumer", own_protocol, assignment))

    def _throw_if_rebalancing(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        if group.group_epoch > member.member_epoch and member.state is not MemberState.UNREVOKED_PARTITIONS:
            self.consumer.schedule(group, member.member_id, JOIN, member.rebalance_timeout_ms,
                                   only_if_absent=True)  # fmt: skip
            raise KafkaError(E.rebalance_in_progress)

    # Heartbeat -----------------------------------------------------------------------------
    def heartbeat(self, entry: Group, member_id: str, instance_id: str | None,
                  generation: int) -> ErrorCode:  # fmt: skip
        group = entry.consumer
        assert group is not None
        try:
            member = self._member(group, member_id, instance_id)
        except KafkaError as exc:
            return exc.error_code
        assert member.classic is not None
        if generation != member.member_epoch:
            return E.illegal_generation
        self.consumer.schedule(group, member.member_id, SESSION, member.classic.session_timeout_ms)
        if (member.member_epoch < group.group_epoch
                or member.state is MemberState.UNREVOKED_PARTITIONS
                or (member.state is MemberState.UNRELEASED_PARTITIONS
                    and not group.waiting_on_unreleased(member))):  # fmt: skip
            self.consumer.schedule(group, member.member_id, JOIN, member.rebalance_timeout_ms,
                                   only_if_absent=True)  # fmt: skip
            return E.rebalance_in_progress
        return E.none

    # LeaveGroup ----------------------------------------------------------------------------
    def leave(self, entry: Group, leaving: list[tuple[str, str | None]]) -> list[ErrorCode]:
        group = entry.consumer
        assert group is not None
        gid = entry.group_id
        errors: list[ErrorCode] = []
        gone: list[str] = []
        for member_id, instance_id in leaving:
            try:
                if instance_id is None:
                    member = self._member(group, member_id, None)
                else:
                    static = group.static_member(instance_id)
                    if static is None:
                        raise KafkaError(E.unknown_member_id)
                    if member_id and static.member_id != member_id:
                        raise KafkaError(E.fenced_instance_id)
                    if not static.uses_classic:
                        raise KafkaError(E.unknown_member_id)
                    member = static
            except KafkaError as exc:
                errors.append(exc.error_code)
                continue
            log.info("group %s: classic member %s left", gid, member.member_id)
            gone.append(member.member_id)
            errors.append(E.none)
        if not gone:
            return errors
        records: list[tuple[bytes, bytes | None]] = []
        for member_id in gone:
            records.extend(self.consumer.member_tombstones(gid, member_id))
        members = {m: v for m, v in group.members.items() if m not in gone}
        self.consumer.maybe_bump(group, members, True, records)
        wrote: list[bool] = []
        outcome: list[ErrorCode] = []

        def written() -> None:
            wrote.append(True)
            for member_id in gone:
                self.consumer.cancel_timers(group, member_id)
            self.consumer.replay_into(group, records)

        # answered once written here (the classic LeaveGroup answers at once)
        self.core.append_replayed(gid, records, written, outcome.append)
        if not wrote:  # nothing written: the members are still in the group
            code = write_error(outcome[0] if outcome else E.coordinator_not_available)
            errors = [code if e is E.none else e for e in errors]
        return errors
