"""The share coordinator: share-partitions' durable state as a state machine (Kafka's
``ShareCoordinatorShard``).

Sans-IO. Each operation on one share-partition key ``(group, topic id, partition)`` is pure:
it returns the records to append to ``__share_group_state`` and the answer, and changes
nothing; the caller appends the records (acks=all) and then feeds each one to
:meth:`ShareCoordinator.replay` with its log offset, which is the only way the state changes —
the same path as loading a partition's log at start-up or failover. Operations on keys of one
``__share_group_state`` partition must therefore run one at a time (the service holds a lock
per partition), so each sees the state its predecessor's records left.

Rules (Kafka's):

- **initialize** (state epoch E, start S): no state, or state at an older epoch → a snapshot
  at epoch E with start S and no batches; state already at epoch E → kept as is, success
  (idempotent); a newer epoch → FENCED_STATE_EPOCH;
- **read** (leader epoch L): no state → start -1, state epoch 0, no batches (uninitialized);
  L older than the stored leader epoch → FENCED_LEADER_EPOCH; L newer → an update record
  that stores L (later writes from older leaders are fenced), then the state;
- **write** (state epoch, leader epoch, start, batches): no state → INVALID_REQUEST
  (uninitialized); an older leader epoch → FENCED_LEADER_EPOCH; an older state epoch →
  FENCED_STATE_EPOCH; else a ShareUpdate with the delta — or a ShareSnapshot of the combined
  state when the state epoch is newer or ``snapshot_every`` updates followed the last
  snapshot;
- **delete**: tombstones for both keys (success when there was no state);
- **summary** (leader epoch): the start offset, epochs and delivery-complete count, or
  FENCED_LEADER_EPOCH for an older leader epoch. Writes nothing.

An update's start offset -1 leaves the start as it was (a leader-epoch-only update). Which
keys this coordinator serves is :attr:`owned` (the partitions of ``__share_group_state`` this
broker leads); keys of other partitions are NOT_COORDINATOR, of a partition being loaded
COORDINATOR_LOAD_IN_PROGRESS.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from strom.broker.group.records import java_string_hashcode
from strom.broker.share import records as rec
from strom.broker.share.state import Batch, PartitionState, combine
from strom.metadata.topics import uuid_to_kafka
from strom.protocol.errors import ErrorCode

E = ErrorCode
Key = tuple[str, uuid.UUID, int]  # (group, topic id, partition)
Record = tuple[bytes, bytes | None]
#: the start offset of an initialized share-partition whose start is not chosen yet
UNINITIALIZED = -1


def coordinator_key(key: Key) -> str:
    """Kafka's ``SharePartitionKey.asCoordinatorKey``: ``group:topicId:partition`` with the
    topic id in Kafka's base64 form (FindCoordinator key type 2 takes this string)."""
    group, topic_id, partition = key
    return f"{group}:{uuid_to_kafka(topic_id)}:{partition}"


def partition_for_key(coordinator_key_text: str, partitions: int) -> int:
    """``Utils.abs(key.hashCode()) % partitions`` as Kafka's ``ShareCoordinatorService``."""
    h = java_string_hashcode(coordinator_key_text)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


@dataclass(frozen=True, slots=True)
class ReadResult:
    error: ErrorCode
    message: str | None = None
    state_epoch: int = 0
    start_offset: int = UNINITIALIZED
    batches: tuple[Batch, ...] = ()
    leader_epoch: int = -1
    delivery_complete_count: int = -1


class ShareCoordinator:
    def __init__(self, partitions: int, snapshot_every: int = 500) -> None:
        self.partitions = partitions
        #: Kafka's share.coordinator.snapshot.update.records.per.snapshot
        self.snapshot_every = snapshot_every
        self.states: dict[Key, PartitionState] = {}
        #: the partitions of __share_group_state served here (None: all, a unit test)
        self.owned: set[int] | None = None
        self.loading: set[int] = set()

    # --- routing --------------------------------------------------------------------------------
    def partition_for(self, key: Key) -> int:
        return partition_for_key(coordinator_key(key), self.partitions)

    def not_here(self, key: Key) -> ErrorCode | None:
        """NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS, or None when the key is served."""
        p = self.partition_for(key)
        if p in self.loading:
            return E.coordinator_load_in_progress
        if self.owned is not None and p not in self.owned:
            return E.not_coordinator
        return None

    def not_here_partition(self, partition: int) -> bool:
        """Whether ``partition`` is not served here now (not led, or being loaded)."""
        return partition in self.loading or (self.owned is not None and partition not in self.owned)

    # --- operations (pure: records to append, and the answer) -----------------------------------
    def initialize(self, key: Key, state_epoch: int, start_offset: int,
                   now_ms: int) -> tuple[list[Record], ErrorCode, str | None]:  # fmt: skip
        current = self.states.get(key)
        if current is not None:
            if current.state_epoch == state_epoch:
                return [], E.none, None
            if current.state_epoch > state_epoch:
                return [], E.fenced_state_epoch, (
                    f"state epoch {state_epoch} is older than {current.state_epoch}")
        snapshot = rec.ShareSnapshotValue(
            snapshot_epoch=rec.i32(current.snapshot_epoch + 1 if current else 0),
            state_epoch=rec.i32(state_epoch),
            leader_epoch=rec.i32(current.leader_epoch if current else -1),
            start_offset=rec.i64(start_offset), create_timestamp=rec.i64(now_ms),
            write_timestamp=rec.i64(now_ms), state_batches=(),
            delivery_complete_count=rec.i32(0 if start_offset >= 0 else -1),
        )  # fmt: skip
        return [self._record(rec.SHARE_SNAPSHOT, key, snapshot)], E.none, None

    def read(self, key: Key, leader_epoch: int) -> tuple[list[Record], ReadResult]:
        current = self.states.get(key)
        if current is None:
            return [], ReadResult(E.none)
        if leader_epoch >= 0 and leader_epoch < current.leader_epoch:
            return [], ReadResult(E.fenced_leader_epoch,
                                  f"leader epoch {leader_epoch} is older than "
                                  f"{current.leader_epoch}")  # fmt: skip
        records: list[Record] = []
        if leader_epoch > current.leader_epoch:
            update = rec.ShareUpdateValue(
                snapshot_epoch=rec.i32(current.snapshot_epoch), leader_epoch=rec.i32(leader_epoch),
                start_offset=rec.i64(UNINITIALIZED), state_batches=(),
            )  # fmt: skip
            records.append(self._record(rec.SHARE_UPDATE, key, update))
        return records, ReadResult(
            E.none, None, current.state_epoch, current.start_offset, current.batches,
            max(leader_epoch, current.leader_epoch), current.delivery_complete_count,
        )  # fmt: skip

    def write(self, key: Key, state_epoch: int, leader_epoch: int, start_offset: int,
              delivery_complete_count: int, batches: Sequence[Batch],
              now_ms: int) -> tuple[list[Record], ErrorCode, str | None]:  # fmt: skip
        current = self.states.get(key)
        if current is None:
            return [], E.invalid_request, "write to an uninitialized share partition"
        if leader_epoch >= 0 and leader_epoch < current.leader_epoch:
            return [], E.fenced_leader_epoch, (
                f"leader epoch {leader_epoch} is older than {current.leader_epoch}")
        if state_epoch >= 0 and state_epoch < current.state_epoch:
            return [], E.fenced_state_epoch, (
                f"state epoch {state_epoch} is older than {current.state_epoch}")
        new_leader_epoch = max(leader_epoch, current.leader_epoch)
        if state_epoch > current.state_epoch or current.updates_since_snapshot >= self.snapshot_every:
            start = start_offset if start_offset != UNINITIALIZED else current.start_offset
            base = current.batches if state_epoch <= current.state_epoch else ()
            snapshot = rec.ShareSnapshotValue(
                snapshot_epoch=rec.i32(current.snapshot_epoch + 1),
                state_epoch=rec.i32(max(state_epoch, current.state_epoch)),
                leader_epoch=rec.i32(new_leader_epoch), start_offset=rec.i64(start),
                create_timestamp=rec.i64(current.create_timestamp), write_timestamp=rec.i64(now_ms),
                state_batches=tuple(rec.batch(*b) for b in combine(base, batches, start)),
                delivery_complete_count=rec.i32(delivery_complete_count),
            )  # fmt: skip
            return [self._record(rec.SHARE_SNAPSHOT, key, snapshot)], E.none, None
        update = rec.ShareUpdateValue(
            snapshot_epoch=rec.i32(current.snapshot_epoch), leader_epoch=rec.i32(new_leader_epoch),
            start_offset=rec.i64(start_offset),
            state_batches=tuple(rec.batch(*b) for b in batches),
            delivery_complete_count=rec.i32(delivery_complete_count),
        )  # fmt: skip
        return [self._record(rec.SHARE_UPDATE, key, update)], E.none, None

    def delete(self, key: Key) -> tuple[list[Record], ErrorCode]:
        if key not in self.states:
            return [], E.none
        group, topic_id, partition = key
        return [(rec.encode_key(rec.SHARE_SNAPSHOT, group, topic_id, partition), None),
                (rec.encode_key(rec.SHARE_UPDATE, group, topic_id, partition), None)], E.none

    def summary(self, key: Key, leader_epoch: int) -> ReadResult:
        current = self.states.get(key)
        if current is None:
            return ReadResult(E.none)
        if leader_epoch >= 0 and leader_epoch < current.leader_epoch:
            return ReadResult(E.fenced_leader_epoch,
                              f"leader epoch {leader_epoch} is older than {current.leader_epoch}")  # fmt: skip
        return ReadResult(E.none, None, current.state_epoch, current.start_offset, (),
                          current.leader_epoch, current.delivery_complete_count)  # fmt: skip

    def cold_snapshots(self, partition: int, now_ms: int, interval_ms: int) -> list[Record]:
        """Snapshots of the keys of ``partition`` that had updates since their snapshot but no
        write for ``interval_ms`` (Kafka's cold-partition snapshots): afterwards their older
        records are no longer needed, so pruning can pass them."""
        out = []
        for key, st in self.states.items():
            if self.partition_for(key) != partition or st.updates_since_snapshot == 0:
                continue
            if st.write_timestamp >= 0 and now_ms - st.write_timestamp < interval_ms:
                continue
            snapshot = rec.ShareSnapshotValue(
                snapshot_epoch=rec.i32(st.snapshot_epoch + 1), state_epoch=rec.i32(st.state_epoch),
                leader_epoch=rec.i32(st.leader_epoch), start_offset=rec.i64(st.start_offset),
                create_timestamp=rec.i64(st.create_timestamp), write_timestamp=rec.i64(now_ms),
                state_batches=tuple(rec.batch(*b) for b in st.batches),
                delivery_complete_count=rec.i32(st.delivery_complete_count),
            )  # fmt: skip
            out.append(self._record(rec.SHARE_SNAPSHOT, key, snapshot))
        return out

    def prune_offset(self, partition: int, log_end: int) -> int:
        """The lowest offset of ``partition`` still needed: every live key's latest snapshot
        and what follows it (``log_end`` when no key lives there)."""
        needed = [st.snapshot_offset for key, st in self.states.items()
                  if self.partition_for(key) == partition and st.snapshot_offset >= 0]  # fmt: skip
        return min(needed, default=log_end)

    # --- state changes --------------------------------------------------------------------------
    def replay(self, offset: int, key_bytes: bytes, value_bytes: bytes | None) -> None:
        """Apply one record of ``__share_group_state`` (appended, or read while loading) at
        log ``offset``. Raises RecordFormatError for a record that is not Kafka's format."""
        record_type, k = rec.decode_key(key_bytes)
        key: Key = (k.group_id, k.topic_id, int(k.partition))
        if value_bytes is None:
            if record_type == rec.SHARE_SNAPSHOT:
                self.states.pop(key, None)
            return
        value = rec.decode_value(record_type, value_bytes)
        batches = tuple(Batch(int(b.first_offset), int(b.last_offset), int(b.delivery_state),
                              int(b.delivery_count)) for b in value.state_batches)  # fmt: skip
        if isinstance(value, rec.ShareSnapshotValue):
            self.states[key] = PartitionState(
                state_epoch=int(value.state_epoch), leader_epoch=int(value.leader_epoch),
                start_offset=int(value.start_offset), batches=batches,
                delivery_complete_count=int(value.delivery_complete_count),
                snapshot_epoch=int(value.snapshot_epoch),
                create_timestamp=int(value.create_timestamp),
                write_timestamp=int(value.write_timestamp), updates_since_snapshot=0,
                snapshot_offset=offset,
            )  # fmt: skip
            return
        current = self.states.get(key)
        if current is None:
            return  # an update whose snapshot was deleted: nothing to apply it to
        start = int(value.start_offset)
        if start != UNINITIALIZED:
            current.start_offset = start
        current.batches = tuple(combine(current.batches, batches, current.start_offset))
        current.leader_epoch = max(current.leader_epoch, int(value.leader_epoch))
        if int(value.delivery_complete_count) >= 0:
            current.delivery_complete_count = int(value.delivery_complete_count)
        current.updates_since_snapshot += 1

    def stamp(self, key_bytes: bytes, now_ms: int) -> None:
        """Note the time of a write appended for ``key_bytes`` (cold-snapshot bookkeeping;
        updates carry no timestamp, so it is kept only in memory)."""
        _t, k = rec.decode_key(key_bytes)
        st = self.states.get((k.group_id, k.topic_id, int(k.partition)))
        if st is not None:
            st.write_timestamp = max(st.write_timestamp, now_ms)

    def unload(self, partition: int) -> int:
        """Forget the keys of ``partition`` (this broker no longer leads it)."""
        gone = [key for key in self.states if self.partition_for(key) == partition]
        for key in gone:
            del self.states[key]
        if self.owned is not None:
            self.owned.discard(partition)
        return len(gone)

    def keys_of(self, group: str) -> list[Key]:
        return sorted(k for k in self.states if k[0] == group)

    @staticmethod
    def _record(record_type: int, key: Key, value: rec.ShareSnapshotValue | rec.ShareUpdateValue
                ) -> Record:  # fmt: skip
        group, topic_id, partition = key
        return rec.encode_key(record_type, group, topic_id, partition), rec.encode_value(value)
