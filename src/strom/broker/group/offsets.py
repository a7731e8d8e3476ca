"""Committed offsets and group deletion: the offset half of the group coordinator.

A part of :class:`~strom.broker.group.coordinator.GroupCoordinator` that works on its
:class:`~strom.broker.group.rebalance.Rebalancer` (the groups, clock, heartbeat timers and
``append``, through that class's public methods). Kafka's rules: a member commits with its member id and current
generation (a stale generation is ILLEGAL_GENERATION, a commit while the group awaits SyncGroup
is REBALANCE_IN_PROGRESS); a commit with generation -1 and no member id is a "simple" commit,
allowed only while the group has no members. Offsets of an Empty group expire
``offsets.retention.minutes`` after the group became empty; of a Stable consumer group, those of
topics no member subscribes to expire that long after their commit. An Empty group with no
offsets left is removed (a tombstone) at the next sweep.

A KIP-848 consumer group checks commits by member epoch instead (Kafka's
``ConsumerGroup.validateOffsetCommit``: STALE_MEMBER_EPOCH for a consumer-protocol member whose
epoch is not its current one, ILLEGAL_GENERATION for a classic member, UNKNOWN_MEMBER_ID,
UNSUPPORTED_VERSION for a consumer-protocol member below OffsetCommit v9); its offsets of topics
no member subscribes to expire ``offsets.retention.minutes`` after their commit, and the group
goes once it has neither members nor offsets.

Commits are acks=-1 (Kafka's storeOffsets): an offset is the group's (visible to OffsetFetch,
replayed the same way by the next coordinator) only once its record is replicated, and the
commit is answered only then; a failed append leaves the committed offsets as they were.
Deletions and expiry are leader-local and apply at once (Kafka's cleanupGroupMetadata).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from strom.broker.group import records as rec
from strom.broker.group.consumer import ConsumerGroups
from strom.broker.group.model import Group, GroupState, OffsetEntry
from strom.broker.group.rebalance import Rebalancer, append_error, offset_write_error, once
from strom.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)
E = ErrorCode
TopicPartition = tuple[str, int]


def _offset_record(
    group_id: str, tp: TopicPartition, entry: OffsetEntry | None
) -> tuple[bytes, bytes | None]:
    key = rec.encode_offset_key(rec.OffsetKey(group_id, tp[0], tp[1]))
    if entry is None:
        return key, None
    value = rec.OffsetValue(
        entry.offset, entry.leader_epoch, entry.metadata, entry.commit_timestamp
    )
    return key, rec.encode_offset_value(value)


OffsetsCallback = Callable[[dict[TopicPartition, ErrorCode]], None]


class Offsets:
    """Offset commits (plain and transactional), fetches, deletions and expiry, and group
    deletion, on the groups of ``core``."""

    def __init__(self, core: Rebalancer, consumer: ConsumerGroups) -> None:
        self.core = core
        self.consumer = consumer
        self._append_seq = 0

    def _next_seq(self) -> int:
        self._append_seq += 1
        return self._append_seq

    def commit_offsets(
        self, group_id: str, member_id: str, instance_id: str | None,
        generation: int, offsets: dict[TopicPartition, OffsetEntry], callback: OffsetsCallback,
        api_version: int = 9,
    ) -> None:  # fmt: skip
        """OffsetCommit: ``callback`` gets the codes once the commit is replicated (at once
        on a single node, or for a refused commit); the offsets are the group's only then.
        ``generation`` is a consumer group member's epoch."""

        def every(code: ErrorCode) -> None:
            callback({tp: code for tp in offsets})

        if (code := self.core.not_here(group_id)) is not None:
            return every(code)
        group = self.core.groups.get(group_id)
        if group is not None and group.consumer is not None:
            refused = self.consumer.check_commit(group.consumer, member_id, instance_id,
                                                 generation, False, api_version)  # fmt: skip
            if refused is not None:
                return every(refused)
            return self._store_offsets(group, offsets, callback)
        if group is None:
            if generation >= 0:
                return every(E.illegal_generation)
            group = Group(group_id, state_timestamp=self.core.clock.time_ms())
            self.core.groups[group_id] = group
        if group.state is GroupState.DEAD:
            return every(E.coordinator_not_available)
        if generation >= 0 or member_id or instance_id is not None:
            if group.is_static_member_fenced(instance_id, member_id):
                return every(E.fenced_instance_id)
            if member_id not in group.members:
                return every(E.unknown_member_id)
            if generation != group.generation:
                return every(E.illegal_generation)
        elif group.state is not GroupState.EMPTY:
            return every(E.unknown_member_id)
        if group.state is GroupState.COMPLETING_REBALANCE:
            return every(E.rebalance_in_progress)
        member = group.members.get(member_id)
        if member is not None:
            self.core.schedule_heartbeat(group, member)
        return self._store_offsets(group, offsets, callback)

    def _store_offsets(
        self, group: Group, offsets: dict[TopicPartition, OffsetEntry], callback: OffsetsCallback
    ) -> None:
        """Kafka's storeOffsets: staged as pending, appended acks=-1, applied to the group when
        replicated (unless a later commit of the partition was applied first, or the offset was
        deleted meanwhile); on failure nothing changes and every partition gets the error."""
        result: dict[TopicPartition, ErrorCode] = {}
        now = self.core.clock.time_ms()
        seq = self._next_seq()
        accepted: dict[TopicPartition, OffsetEntry] = {}
        for tp, entry in offsets.items():
            if len(entry.metadata.encode("utf-8")) > self.core.config.offset_metadata_max_bytes:
                result[tp] = E.offset_metadata_too_large
            else:
                accepted[tp] = replace(entry, commit_timestamp=now, append_seq=seq)
        group.pending_offsets.update(dict.fromkeys(accepted, seq))

        def done(code: ErrorCode) -> None:
            live = group.state is not GroupState.DEAD
            for tp, entry in accepted.items():
                staged = group.pending_offsets.get(tp)
                if code is E.none and live and staged is not None:
                    current = group.offsets.get(tp)
                    if current is None or current.append_seq < seq:
                        group.offsets[tp] = entry
                if staged == seq:
                    del group.pending_offsets[tp]
            if code is not E.none:
                log.warning("group %s: storing offsets failed: %s", group.group_id, code.name)
            result.update(dict.fromkeys(accepted, offset_write_error(code)))
            callback(result)

        self.core.append_acked(
            group.group_id,
            [_offset_record(group.group_id, tp, e) for tp, e in accepted.items()],
            done,
        )

    # transactional offsets (TxnOffsetCommit) ------------------------------------------------
    def commit_txn_offsets(
        self, group_id: str, producer_id: int, producer_epoch: int, member_id: str,
        instance_id: str | None, generation: int, offsets: dict[TopicPartition, OffsetEntry],
        callback: OffsetsCallback,
    ) -> None:  # fmt: skip
        """Write offsets as a transactional batch of that producer (acks=-1; ``callback`` gets
        the codes once it is replicated). They wait as the producer's pending offsets from the
        append on (Kafka's prepareTxnOffsetCommit; dropped again if the append fails), and
        become the group's committed offsets only when the COMMIT marker reaches this partition
        (:meth:`complete_txn`); ABORT drops them."""

        def every(code: ErrorCode) -> None:
            callback({tp: code for tp in offsets})

        if (code := self.core.not_here(group_id)) is not None:
            return every(code)
        group = self.core.groups.get(group_id)
        if group is not None and group.consumer is not None:
            if (generation >= 0 or member_id) and (refused := self.consumer.check_commit(
                    group.consumer, member_id, instance_id, generation, True, 9)) is not None:  # fmt: skip
                return every(refused)
        elif group is not None and group.state is GroupState.DEAD:
            return every(E.coordinator_not_available)
        elif group is not None and (generation >= 0 or member_id):  # KIP-447 fencing
            if group.is_static_member_fenced(instance_id, member_id):
                return every(E.fenced_instance_id)
            if member_id and member_id not in group.members:
                return every(E.unknown_member_id)
            if generation >= 0 and generation != group.generation:
                return every(E.illegal_generation)
        if self.core.append_txn is None:
            return every(E.coordinator_not_available)
        now = self.core.clock.time_ms()
        seq = self._next_seq()
        accepted = {tp: replace(e, commit_timestamp=now, append_seq=seq) for tp, e in offsets.items()
                    if len(e.metadata.encode("utf-8")) <= self.core.config.offset_metadata_max_bytes}  # fmt: skip
        result = {tp: E.offset_metadata_too_large for tp in offsets if tp not in accepted}
        if not accepted:
            return callback(result)
        pending = self.core.pending_txn_offsets.setdefault(producer_id, {})
        for tp, entry in accepted.items():
            pending[(group_id, tp[0], tp[1])] = entry

        def done(code: ErrorCode) -> None:
            if code is not E.none:
                log.warning("group %s: storing transactional offsets failed: %s",
                            group_id, code.name)  # fmt: skip
                staged = self.core.pending_txn_offsets.get(producer_id, {})
                for tp, entry in accepted.items():
                    if staged.get((group_id, tp[0], tp[1])) is entry:
                        del staged[(group_id, tp[0], tp[1])]
                if not staged:
                    self.core.pending_txn_offsets.pop(producer_id, None)
            result.update(dict.fromkeys(accepted, offset_write_error(code)))
            callback(result)

        records = [_offset_record(group_id, tp, e) for tp, e in accepted.items()]
        finish = once(done)
        try:
            self.core.append_txn(self.core.partition_for(group_id), records, producer_id, producer_epoch,
                            finish)  # fmt: skip
        except Exception as exc:
            log.warning("group %s: appending transactional offsets failed: %s", group_id, exc)
            finish(append_error(exc))

    def replay_txn_offset(self, producer_id: int, key: bytes, value: bytes | None) -> None:
        """Loading: a record of a transactional batch waits for its producer's marker."""
        k = rec.decode_key(key)
        if isinstance(k, rec.OffsetKey) and value is not None:
            v = rec.decode_offset_value(value)
            self.core.pending_txn_offsets.setdefault(producer_id, {})[(k.group, k.topic, k.partition)] = (
                OffsetEntry(v.offset, v.leader_epoch, v.metadata, v.commit_timestamp))  # fmt: skip

    def complete_txn(self, producer_id: int, commit: bool) -> None:
        """A transaction marker reached ``__consumer_offsets``: publish or drop the
        producer's pending offsets."""
        pending = self.core.pending_txn_offsets.pop(producer_id, {})
        if not commit:
            return
        for (group_id, topic, partition), entry in pending.items():
            if self.core.loading:
                self.core.loaded_offsets.setdefault(group_id, {})[(topic, partition)] = entry
                continue
            group = self.core.groups.get(group_id)
            if group is None or group.state is GroupState.DEAD:
                group = Group(group_id, state_timestamp=self.core.clock.time_ms())
                self.core.groups[group_id] = group
            current = group.offsets.get((topic, partition))
            # Kafka's olderThan: a plain commit appended after this one's record stays
            if current is None or current.append_seq <= entry.append_seq:
                group.offsets[(topic, partition)] = entry

    def has_pending_txn_offset(self, group_id: str, tp: TopicPartition) -> bool:
        return any((group_id, *tp) in p for p in self.core.pending_txn_offsets.values())

    def check_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> ErrorCode | None:
        """OffsetFetch v9+ of a consumer group's member: the code refusing it, or None (Kafka's
        validateOffsetFetch; a classic group checks nothing)."""
        if (code := self.core.not_here(group_id)) is not None:
            return code
        group = self.core.groups.get(group_id)
        if group is None or group.consumer is None:
            return None
        return self.consumer.check_fetch(group.consumer, member_id, member_epoch)

    def fetch_offsets(
        self, group_id: str, partitions: list[TopicPartition] | None
    ) -> dict[TopicPartition, OffsetEntry | None]:
        """Committed offsets (None = nothing committed); all of the group's if ``partitions``
        is None."""
        if (code := self.core.not_here(group_id)) is not None:
            raise KafkaError(code)
        group = self.core.groups.get(group_id)
        stored = group.offsets if group is not None and group.state is not GroupState.DEAD else {}
        if partitions is None:
            return dict(stored)
        return {tp: stored.get(tp) for tp in partitions}

    def delete_groups(self, group_ids: list[str]) -> dict[str, ErrorCode]:
        result: dict[str, ErrorCode] = {}
        for gid in group_ids:
            if (code := self.core.not_here(gid)) is not None:
                result[gid] = code
                continue
            group = self.core.groups.get(gid)
            if group is None or group.state is GroupState.DEAD:
                result[gid] = E.group_id_not_found
            elif group.state is not GroupState.EMPTY or group.has_members:
                result[gid] = E.non_empty_group
            else:
                records = [_offset_record(gid, tp, None) for tp in group.offsets]
                if group.consumer is not None:
                    records.extend(group.consumer.tombstones())
                else:
                    records.append((rec.encode_group_key(rec.GroupKey(gid)), None))
                try:
                    self.core.append(gid, records)
                except Exception as exc:
                    log.warning("group %s: deleting failed: %s", gid, exc)
                    result[gid] = E.coordinator_not_available
                    continue
                if group.consumer is not None:
                    self.consumer.cancel_all(group.consumer)
                self.core.transition(group, GroupState.DEAD)
                del self.core.groups[gid]
                log.info("group %s deleted", gid)
                result[gid] = E.none
        return result

    def delete_offsets(
        self, group_id: str, partitions: list[TopicPartition]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        if (code := self.core.not_here(group_id)) is not None:
            return code, {}
        group = self.core.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return E.group_id_not_found, {}
        result: dict[TopicPartition, ErrorCode] = {}
        if group.consumer is not None and group.consumer.members:
            cg = group.consumer
            subscribed = self.consumer.subscribed(cg.members, cg.regexes)
            deletable = []
            for tp in partitions:
                if tp[0] in subscribed:
                    result[tp] = E.group_subscribed_to_topic
                else:
                    deletable.append(tp)
        elif group.state is GroupState.EMPTY:
            deletable = list(partitions)
        elif group.protocol_type == "consumer":
            subscribed = group.subscribed_topics() or set()
            deletable = []
            for tp in partitions:
                if tp[0] in subscribed:
                    result[tp] = E.group_subscribed_to_topic
                else:
                    deletable.append(tp)
        else:
            return E.non_empty_group, {}
        present = [tp for tp in deletable if tp in group.offsets]
        try:
            self.core.append(group_id, [_offset_record(group_id, tp, None) for tp in present])
        except Exception as exc:
            log.warning("group %s: deleting offsets failed: %s", group_id, exc)
            return E.coordinator_not_available, {}
        for tp in deletable:
            group.offsets.pop(tp, None)
            group.pending_offsets.pop(tp, None)  # a commit still replicating is not applied
            result[tp] = E.none
        return E.none, result

    def expire_offsets(self) -> int:
        """Drop expired offsets (tombstones), and Empty groups left with none; returns the count."""
        if self.core.loading:
            return 0
        now = self.core.clock.time_ms()
        retention = self.core.config.offsets_retention_ms
        removed = 0
        for group in list(self.core.groups.values()):
            expired: list[TopicPartition] = []
            if group.consumer is not None:
                # Kafka's ConsumerGroup: by commit time, topics no member subscribes to
                cg = group.consumer
                read = self.consumer.subscribed(cg.members, cg.regexes)
                expired = [tp for tp, e in group.offsets.items()
                           if tp[0] not in read and e.commit_timestamp + retention <= now
                           and tp not in group.pending_offsets]  # fmt: skip
            elif group.state is GroupState.EMPTY:
                for tp, entry in group.offsets.items():
                    if tp in group.pending_offsets:
                        continue  # a newer commit is replicating (Kafka's removeExpiredOffsets)
                    base = (
                        group.state_timestamp
                        if group.state_timestamp >= 0
                        else entry.commit_timestamp
                    )
                    if base + retention <= now:
                        expired.append(tp)
            elif group.state is GroupState.STABLE and group.protocol_type == "consumer":
                subscribed = group.subscribed_topics()
                if subscribed is not None:
                    expired = [
                        tp for tp, e in group.offsets.items()
                        if tp[0] not in subscribed and e.commit_timestamp + retention <= now
                        and tp not in group.pending_offsets
                    ]  # fmt: skip
            records = [_offset_record(group.group_id, tp, None) for tp in expired]
            # Kafka's cleanupGroupMetadata: an Empty group left without offsets is removed at
            # this sweep, however recently it became empty; a member still between the two
            # JoinGroup steps then gets UNKNOWN_MEMBER_ID and joins afresh, as with Kafka.
            drop_group = (group.state is GroupState.EMPTY and not group.has_members
                          and len(expired) == len(group.offsets) and not group.pending_offsets)  # fmt: skip
            if drop_group and group.consumer is not None:
                records.extend(group.consumer.tombstones())
            elif drop_group:
                records.append((rec.encode_group_key(rec.GroupKey(group.group_id)), None))
            if not records:
                continue
            try:
                self.core.append(group.group_id, records)
            except Exception as exc:
                log.warning("group %s: expiring offsets failed: %s", group.group_id, exc)
                continue
            for tp in expired:
                del group.offsets[tp]
            removed += len(expired)
            if drop_group:
                if group.consumer is not None:
                    self.consumer.cancel_all(group.consumer)
                for timer in group.pending_members.values():
                    timer.cancel()
                group.pending_members.clear()
                self.core.transition(group, GroupState.DEAD)
                del self.core.groups[group.group_id]
                log.info("group %s expired (empty, no offsets)", group.group_id)
        return removed
