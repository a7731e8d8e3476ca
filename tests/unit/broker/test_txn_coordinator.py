"""The transaction coordinator as a state machine: fake clock, in-memory __transaction_state,
recorded markers; restart = replay of the records into a new coordinator."""

from __future__ import annotations

import pytest

from strom.broker.producer_ids import ProducerIdAndEpoch
from strom.broker.txn import records as rec
from strom.broker.txn.coordinator import TransactionCoordinator, TxnConfig, TxnMarker
from strom.broker.txn.records import TxnState, TxnValue
from strom.clock import FakeClock
from strom.protocol.errors import ErrorCode as E


class Harness:
    def __init__(self, clock: FakeClock, log: list[tuple[int, bytes, bytes | None]] | None = None,
                 **cfg: int) -> None:  # fmt: skip
        self.clock = clock
        self.log = [] if log is None else log
        self.markers: list[TxnMarker] = []
        self.fail_markers = False
        self.next_pid = 1000 + len(self.log)
        self.coord = TransactionCoordinator(TxnConfig(**cfg), clock, self.append,
                                            self.write, self.allocate)  # fmt: skip
        for _partition, key, value in self.log:
            self.coord.replay(rec.decode_key(key), None if value is None else rec.decode_value(value))
        self.coord.finish_loading()

    def append(self, partition: int, key: bytes, value: bytes | None) -> None:
        self.log.append((partition, key, value))

    def write(self, markers: list[TxnMarker]) -> dict[tuple[str, int], E]:
        self.markers.extend(markers)
        code = E.not_leader_or_follower if self.fail_markers else E.none
        return {tp: code for m in markers for tp in m.partitions}

    def allocate(self) -> int:
        self.next_pid += 1
        return self.next_pid


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_700_000_000_000)


def test_record_formats_round_trip() -> None:
    v = TxnValue(42, 7, 60000, TxnState.ONGOING, {("a", 1), ("a", 0), ("b", 3)}, 5, 4, 41)
    raw = rec.encode_value(v)
    assert raw[:2] == b"\x00\x01"  # value version 1 (flexible)
    assert rec.decode_value(raw) == v
    assert rec.encode_key("tx") == b"\x00\x00\x00\x02tx"
    assert rec.decode_key(rec.encode_key("tx")) == "tx"
    with pytest.raises(rec.TxnRecordError):
        rec.decode_value(b"\x00\x07" + raw[2:])
    with pytest.raises(rec.TxnRecordError):
        rec.decode_value(raw[:20])


def test_commit_writes_markers_to_every_partition(clock: FakeClock) -> None:
    h = Harness(clock)
    code, pid, epoch = h.coord.init_producer_id("tx", 60000)
    assert (code, epoch) == (E.none, 0)
    assert h.coord.add_partitions("tx", pid, epoch, [("t", 0), ("t", 1)]) == E.none
    assert h.coord.add_partitions("tx", pid, epoch, [("u", 0)]) == E.none
    assert h.coord.txns["tx"].state is TxnState.ONGOING
    assert h.coord.end_txn("tx", pid, epoch, True) == E.none
    assert h.markers == [TxnMarker(pid, epoch, True, 0, (("t", 0), ("t", 1), ("u", 0)))]
    assert h.coord.txns["tx"].state is TxnState.COMPLETE_COMMIT
    assert h.coord.txns["tx"].partitions == set()
    states = [rec.decode_value(v).state for _, _, v in h.log if v is not None]
    assert states == [TxnState.EMPTY, TxnState.ONGOING, TxnState.ONGOING,
                      TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT]  # fmt: skip
    assert h.coord.end_txn("tx", pid, epoch, True) == E.none  # a retry
    assert h.coord.end_txn("tx", pid, epoch, False) == E.invalid_txn_state
    assert len(h.markers) == 1


def test_new_instance_fences_the_old_and_aborts_its_transaction(clock: FakeClock) -> None:
    h = Harness(clock)
    _, pid, epoch = h.coord.init_producer_id("tx", 60000)
    h.coord.add_partitions("tx", pid, epoch, [("t", 0)])
    code, pid2, epoch2 = h.coord.init_producer_id("tx", 60000)
    assert (code, pid2, epoch2) == (E.none, pid, epoch + 1)
    assert h.markers == [TxnMarker(pid, epoch + 1, False, 0, (("t", 0),))]
    assert h.coord.add_partitions("tx", pid, epoch, [("t", 0)]) == E.producer_fenced
    assert h.coord.end_txn("tx", pid, epoch, True) == E.producer_fenced
    assert h.coord.end_txn("tx", pid + 1, epoch2, True) == E.invalid_producer_id_mapping
    assert h.coord.end_txn("tx", pid, epoch2, True) == E.invalid_txn_state  # nothing open
    # KIP-360: the old instance cannot bump the epoch in its own name
    assert h.coord.init_producer_id("tx", 60000, ProducerIdAndEpoch(pid, epoch))[0] == E.producer_fenced
    assert h.coord.init_producer_id("tx", 60000, ProducerIdAndEpoch(pid, epoch2)) == (E.none, pid, epoch2 + 1)


def test_epoch_exhaustion_moves_to_a_new_producer_id(clock: FakeClock) -> None:
    h = Harness(clock)
    _, pid, _ = h.coord.init_producer_id("tx", 60000)
    h.coord.txns["tx"].producer_epoch = 32766
    code, pid2, epoch2 = h.coord.init_producer_id("tx", 60000)
    assert code == E.none and pid2 != pid and epoch2 == 0
    assert h.coord.txns["tx"].previous_producer_id == pid


def test_timeouts_and_bad_requests(clock: FakeClock) -> None:
    h = Harness(clock, max_timeout_ms=10_000)
    assert h.coord.init_producer_id("tx", 10_001)[0] == E.invalid_transaction_timeout
    assert h.coord.init_producer_id("tx", 0)[0] == E.invalid_transaction_timeout
    _, pid, epoch = h.coord.init_producer_id("tx", 1000)
    assert h.coord.add_partitions("nope", pid, epoch, [("t", 0)]) == E.invalid_producer_id_mapping
    h.coord.add_partitions("tx", pid, epoch, [("t", 0)])
    clock.advance(1000)
    assert h.coord.abort_timed_out() == []
    clock.advance(1)
    assert h.coord.abort_timed_out() == ["tx"]
    assert h.markers == [TxnMarker(pid, epoch + 1, False, 0, (("t", 0),))]  # epoch bumped
    assert h.coord.end_txn("tx", pid, epoch, True) == E.producer_fenced
    assert h.coord.txns["tx"].state is TxnState.COMPLETE_ABORT


def test_restart_completes_prepared_and_keeps_ongoing(clock: FakeClock) -> None:
    h = Harness(clock)
    _, pid, epoch = h.coord.init_producer_id("a", 60000)
    h.coord.add_partitions("a", pid, epoch, [("t", 0)])
    _, pid_b, epoch_b = h.coord.init_producer_id("b", 60000)
    h.coord.add_partitions("b", pid_b, epoch_b, [("t", 1)])
    h.fail_markers = True  # the broker dies after PrepareCommit, before the markers
    assert h.coord.end_txn("a", pid, epoch, True) == E.coordinator_not_available
    assert h.coord.txns["a"].state is TxnState.PREPARE_COMMIT
    assert h.coord.end_txn("a", pid, epoch, True) == E.concurrent_transactions
    again = Harness(clock, list(h.log))
    assert again.markers == [TxnMarker(pid, epoch, True, 0, (("t", 0),))]
    assert again.coord.txns["a"].state is TxnState.COMPLETE_COMMIT
    assert again.coord.txns["b"].state is TxnState.ONGOING  # its producer may come back
    assert again.coord.end_txn("b", pid_b, epoch_b, False) == E.none
    clock.advance(60_001)
    assert again.coord.abort_timed_out() == []


def test_transactional_ids_expire_when_idle(clock: FakeClock) -> None:
    h = Harness(clock, id_expiration_ms=1000)
    _, pid, epoch = h.coord.init_producer_id("idle", 60000)
    _, pid2, epoch2 = h.coord.init_producer_id("busy", 60000)
    h.coord.add_partitions("busy", pid2, epoch2, [("t", 0)])
    clock.advance(1000)
    assert h.coord.expire_ids() == ["idle"]
    assert h.log[-1][2] is None  # tombstone
    assert set(Harness(clock, list(h.log)).coord.txns) == {"busy"}


def test_partitions_owned_loaded_and_unloaded(clock: FakeClock) -> None:
    """Ids of partitions not led here are NOT_COORDINATOR; unloading a partition forgets its
    ids, loading it again (its records only) brings them back."""
    h = Harness(clock)
    _, pid, epoch = h.coord.init_producer_id("a", 60000)
    p = h.coord.partition_for("a")
    other = next(t for t in (f"x{i}" for i in range(100)) if h.coord.partition_for(t) != p)
    h.coord.owned = {p}
    assert h.coord.init_producer_id(other, 60000)[0] == E.not_coordinator
    assert h.coord.check(other, 1, 0) == E.not_coordinator
    h.coord.unload_partition(p)
    assert "a" not in h.coord.txns and h.coord.check("a", pid, epoch) == E.not_coordinator
    h.coord.loading = True
    for partition, key, value in h.log:
        if partition == p:
            h.coord.replay(rec.decode_key(key), None if value is None else rec.decode_value(value))
    h.coord.finish_loading(p)
    assert h.coord.check("a", pid, epoch) == E.none
