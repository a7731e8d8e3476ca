"""The share coordinator state machine: records out, state only through replay."""

from __future__ import annotations

import uuid

from strom.broker.share import records as rec
from strom.broker.share.coordinator import ShareCoordinator, coordinator_key, partition_for_key
from strom.broker.share.state import ACKNOWLEDGED, AVAILABLE, Batch
from strom.protocol.errors import ErrorCode

TID = uuid.UUID("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")
KEY = ("g", TID, 0)


class Log:
    """Appends records and replays them, as the service does after replication."""

    def __init__(self, coord: ShareCoordinator) -> None:
        self.coord = coord
        self.records: list[tuple[bytes, bytes | None]] = []

    def append(self, records: list[tuple[bytes, bytes | None]]) -> None:
        for key, value in records:
            self.coord.replay(len(self.records), key, value)
            self.records.append((key, value))


def make(snapshot_every: int = 500) -> tuple[ShareCoordinator, Log]:
    coord = ShareCoordinator(50, snapshot_every)
    return coord, Log(coord)


def test_coordinator_key_and_partition_are_kafkas() -> None:
    text = coordinator_key(KEY)
    assert text == "g:Dx4tPEtaaXiHlqW0w9Lh8A:0"
    assert 0 <= partition_for_key(text, 50) < 50
    assert ShareCoordinator(50).partition_for(KEY) == partition_for_key(text, 50)


def test_initialize_read_write_and_replay() -> None:
    coord, log = make()
    records, result = coord.read(KEY, 0)
    assert records == [] and (result.error, result.start_offset, result.state_epoch) == (ErrorCode.none, -1, 0)
    records, code, _ = coord.write(KEY, 0, 0, 0, 0, [], 1)
    assert code == ErrorCode.invalid_request and records == []
    records, code, _ = coord.initialize(KEY, 0, -1, 1)
    assert code == ErrorCode.none and len(records) == 1
    assert coord.states == {}  # nothing changes before the records are replayed
    log.append(records)
    assert coord.initialize(KEY, 0, 5, 2)[0] == []  # same epoch: kept as it is
    records, result = coord.read(KEY, 3)
    assert result.start_offset == -1 and result.leader_epoch == 3 and len(records) == 1
    log.append(records)
    assert coord.states[KEY].leader_epoch == 3
    records, code, _ = coord.write(KEY, 0, 3, 10, 1, [Batch(10, 12, ACKNOWLEDGED, 1)], 4)
    assert code == ErrorCode.none and rec.decode_key(records[0][0])[0] == rec.SHARE_UPDATE
    log.append(records)
    st = coord.states[KEY]
    assert st.start_offset == 10 and st.batches == (Batch(10, 12, ACKNOWLEDGED, 1),)
    assert coord.summary(KEY, 3).delivery_complete_count == 1


def test_older_leader_and_state_epochs_are_fenced() -> None:
    coord, log = make()
    log.append(coord.initialize(KEY, 1, 0, 0)[0])
    log.append(coord.read(KEY, 5)[0])
    assert coord.write(KEY, 1, 4, 0, 0, [], 0)[1] == ErrorCode.fenced_leader_epoch
    assert coord.read(KEY, 4)[1].error == ErrorCode.fenced_leader_epoch
    assert coord.write(KEY, 0, 5, 0, 0, [], 0)[1] == ErrorCode.fenced_state_epoch
    assert coord.initialize(KEY, 0, 0, 0)[1] == ErrorCode.fenced_state_epoch


def test_a_newer_state_epoch_resets_the_state_with_a_snapshot() -> None:
    coord, log = make()
    log.append(coord.initialize(KEY, 0, 0, 0)[0])
    log.append(coord.write(KEY, 0, 0, 0, 0, [Batch(0, 4, AVAILABLE, 2)], 0)[0])
    records, code, _ = coord.initialize(KEY, 1, 100, 0)
    assert code == ErrorCode.none
    log.append(records)
    st = coord.states[KEY]
    assert (st.state_epoch, st.start_offset, st.batches) == (1, 100, ())


def test_snapshots_every_n_updates_and_pruning_keeps_the_latest() -> None:
    coord, log = make(snapshot_every=2)
    log.append(coord.initialize(KEY, 0, 0, 0)[0])
    kinds = []
    for i in range(5):
        records, _, _ = coord.write(KEY, 0, 0, i, 0, [Batch(i, i, AVAILABLE, 1)], i)
        kinds.append(rec.decode_key(records[0][0])[0])
        log.append(records)
    assert kinds == [rec.SHARE_UPDATE, rec.SHARE_UPDATE, rec.SHARE_SNAPSHOT, rec.SHARE_UPDATE,
                     rec.SHARE_UPDATE]
    p = coord.partition_for(KEY)
    assert coord.prune_offset(p, len(log.records)) == 3  # the snapshot written at offset 3
    # replaying from the prune point gives the same state
    again = ShareCoordinator(50)
    for offset, (key, value) in enumerate(log.records[3:], start=3):
        again.replay(offset, key, value)
    assert again.states[KEY].batches == coord.states[KEY].batches
    assert again.states[KEY].start_offset == 4


def test_cold_partitions_get_a_snapshot() -> None:
    coord, log = make()
    log.append(coord.initialize(KEY, 0, 0, 0)[0])
    log.append(coord.write(KEY, 0, 0, 2, 0, [], 10)[0])
    coord.stamp(log.records[-1][0], 10)
    p = coord.partition_for(KEY)
    assert coord.cold_snapshots(p, 100, 1000) == []
    records = coord.cold_snapshots(p, 2000, 1000)
    assert len(records) == 1
    log.append(records)
    assert coord.states[KEY].updates_since_snapshot == 0
    assert coord.cold_snapshots(p, 5000, 1000) == []  # no update since: no new snapshot


def test_delete_tombstones_both_keys() -> None:
    coord, log = make()
    assert coord.delete(KEY) == ([], ErrorCode.none)
    log.append(coord.initialize(KEY, 0, 0, 0)[0])
    records, code = coord.delete(KEY)
    assert code == ErrorCode.none and [v for _, v in records] == [None, None]
    log.append(records)
    assert KEY not in coord.states


def test_ownership() -> None:
    coord = ShareCoordinator(50)
    coord.owned = set()
    assert coord.not_here(KEY) == ErrorCode.not_coordinator
    p = coord.partition_for(KEY)
    coord.loading.add(p)
    assert coord.not_here(KEY) == ErrorCode.coordinator_load_in_progress
    coord.loading.clear()
    coord.owned.add(p)
    assert coord.not_here(KEY) is None
