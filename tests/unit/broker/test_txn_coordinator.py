"""The transaction coordinator as a state machine: fake clock, in-memory __transaction_state,
recorded markers; restart = a new coordinator loading the records (every partition owned).
The coordinator's ports are coroutines (replicated appends, markers sent to leaders), so each
test runs in its own event loop."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from strom.broker.producer_ids import ProducerIdAndEpoch
from strom.broker.txn import records as rec
from strom.broker.txn.coordinator import TransactionCoordinator, TxnConfig, TxnMarker
from strom.broker.txn.records import TxnState, TxnValue
from strom.clock import FakeClock
from strom.protocol.errors import ErrorCode as E
from strom.protocol.errors import KafkaError


def run(fn: Callable[..., Awaitable[None]]) -> Callable[..., None]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        asyncio.run(fn(*args, **kwargs))

    return wrapper


class Harness:
    def __init__(self, clock: FakeClock, log: list[tuple[int, bytes, bytes | None]] | None = None,
                 epoch: int = 0, **cfg: int) -> None:  # fmt: skip
        self.clock = clock
        self.log = [] if log is None else log
        self.markers: list[TxnMarker] = []
        self.fail_markers = False
        self.fail_append: E | None = None
        self.next_pid = 1000 + len(self.log)
        self.coord = TransactionCoordinator(TxnConfig(**cfg), clock, self.append,
                                            self.write, self.allocate)  # fmt: skip
        for partition in range(self.coord.config.partitions):
            self.coord.begin_load(partition, epoch)
            self.coord.finish_load(partition, epoch, [
                (rec.decode_key(k), None if v is None else rec.decode_value(v))
                for p, k, v in self.log if p == partition])  # fmt: skip

    async def append(self, partition: int, key: bytes, value: bytes | None) -> None:
        await asyncio.sleep(0)
        if self.fail_append is not None:
            raise KafkaError(self.fail_append)
        self.log.append((partition, key, value))

    async def write(self, marker: TxnMarker, still_owner: Callable[[], bool]) -> E:
        await asyncio.sleep(0)
        self.markers.append(marker)
        # the coordinator lost its partition before the markers were all written
        return E.not_coordinator if self.fail_markers else E.none

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


@run
async def test_commit_writes_markers_to_every_partition(clock: FakeClock) -> None:
    h = Harness(clock)
    code, pid, epoch = await h.coord.init_producer_id("tx", 60000)
    assert (code, epoch) == (E.none, 0)
    assert await h.coord.add_partitions("tx", pid, epoch, [("t", 0), ("t", 1)]) == E.none
    assert await h.coord.add_partitions("tx", pid, epoch, [("u", 0)]) == E.none
    assert h.coord.txns["tx"].state is TxnState.ONGOING
    assert await h.coord.end_txn("tx", pid, epoch, True) == E.none
    assert h.markers == [TxnMarker(pid, epoch, True, 0, (("t", 0), ("t", 1), ("u", 0)))]
    assert h.coord.txns["tx"].state is TxnState.COMPLETE_COMMIT
    assert h.coord.txns["tx"].partitions == set()
    states = [rec.decode_value(v).state for _, _, v in h.log if v is not None]
    assert states == [TxnState.EMPTY, TxnState.ONGOING, TxnState.ONGOING,
                      TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT]  # fmt: skip
    assert await h.coord.end_txn("tx", pid, epoch, True) == E.none  # a retry
    assert await h.coord.end_txn("tx", pid, epoch, False) == E.invalid_txn_state
    assert len(h.markers) == 1


@run
async def test_new_instance_fences_the_old_and_aborts_its_transaction(clock: FakeClock) -> None:
    h = Harness(clock)
    _, pid, epoch = await h.coord.init_producer_id("tx", 60000)
    await h.coord.add_partitions("tx", pid, epoch, [("t", 0)])
    code, pid2, epoch2 = await h.coord.init_producer_id("tx", 60000)
    assert (code, pid2, epoch2) == (E.none, pid, epoch + 1)
    assert h.markers == [TxnMarker(pid, epoch + 1, False, 0, (("t", 0),))]
    assert await h.coord.add_partitions("tx", pid, epoch, [("t", 0)]) == E.producer_fenced
    assert await h.coord.end_txn("tx", pid, epoch, True) == E.producer_fenced
    assert await h.coord.end_txn("tx", pid + 1, epoch2, True) == E.invalid_producer_id_mapping
    assert await h.coord.end_txn("tx", pid, epoch2, True) == E.invalid_txn_state  # nothing open
    # KIP-360: the old instance cannot bump the epoch in its own name
    assert (await h.coord.init_producer_id("tx", 60000, ProducerIdAndEpoch(pid, epoch)))[0] == E.producer_fenced
    assert await h.coord.init_producer_id("tx", 60000, ProducerIdAndEpoch(pid, epoch2)) == (E.none, pid, epoch2 + 1)


@run
async def test_epoch_exhaustion_moves_to_a_new_producer_id(clock: FakeClock) -> None:
    h = Harness(clock)
    _, pid, _ = await h.coord.init_producer_id("tx", 60000)
    h.coord.txns["tx"].producer_epoch = 32766
    code, pid2, epoch2 = await h.coord.init_producer_id("tx", 60000)
    assert code == E.none and pid2 != pid and epoch2 == 0
    assert h.coord.txns["tx"].previous_producer_id == pid


@run
async def test_timeouts_and_bad_requests(clock: FakeClock) -> None:
    h = Harness(clock, max_timeout_ms=10_000)
    assert (await h.coord.init_producer_id("tx", 10_001))[0] == E.invalid_transaction_timeout
    assert (await h.coord.init_producer_id("tx", 0))[0] == E.invalid_transaction_timeout
    _, pid, epoch = await h.coord.init_producer_id("tx", 1000)
    assert await h.coord.add_partitions("nope", pid, epoch, [("t", 0)]) == E.invalid_producer_id_mapping
    await h.coord.add_partitions("tx", pid, epoch, [("t", 0)])
    clock.advance(1000)
    assert await h.coord.abort_timed_out() == []
    clock.advance(1)
    assert await h.coord.abort_timed_out() == ["tx"]
    assert h.markers == [TxnMarker(pid, epoch + 1, False, 0, (("t", 0),))]  # epoch bumped
    assert await h.coord.end_txn("tx", pid, epoch, True) == E.producer_fenced
    assert h.coord.txns["tx"].state is TxnState.COMPLETE_ABORT


@run
async def test_restart_completes_prepared_and_keeps_ongoing(clock: FakeClock) -> None:
    h = Harness(clock)
    _, pid, epoch = await h.coord.init_producer_id("a", 60000)
    await h.coord.add_partitions("a", pid, epoch, [("t", 0)])
    _, pid_b, epoch_b = await h.coord.init_producer_id("b", 60000)
    await h.coord.add_partitions("b", pid_b, epoch_b, [("t", 1)])
    h.fail_markers = True  # the broker dies after PrepareCommit, before the markers
    assert await h.coord.end_txn("a", pid, epoch, True) == E.not_coordinator
    assert h.coord.txns["a"].state is TxnState.PREPARE_COMMIT
    assert await h.coord.end_txn("a", pid, epoch, True) == E.concurrent_transactions
    again = Harness(clock, list(h.log), epoch=1)  # the next leader epoch of the partition
    await again.coord.wait_completions()
    assert again.markers == [TxnMarker(pid, epoch, True, 1, (("t", 0),))]
    assert again.coord.txns["a"].state is TxnState.COMPLETE_COMMIT
    assert again.coord.txns["b"].state is TxnState.ONGOING  # its producer may come back
    assert await again.coord.end_txn("b", pid_b, epoch_b, False) == E.none
    clock.advance(60_001)
    assert await again.coord.abort_timed_out() == []


@run
async def test_transactional_ids_expire_when_idle(clock: FakeClock) -> None:
    h = Harness(clock, id_expiration_ms=1000)
    _, pid, epoch = await h.coord.init_producer_id("idle", 60000)
    _, pid2, epoch2 = await h.coord.init_producer_id("busy", 60000)
    await h.coord.add_partitions("busy", pid2, epoch2, [("t", 0)])
    clock.advance(1000)
    assert await h.coord.expire_ids() == ["idle"]
    assert h.log[-1][2] is None  # tombstone
    assert set(Harness(clock, list(h.log)).coord.txns) == {"busy"}


@run
async def test_ownership_follows_load_and_unload(clock: FakeClock) -> None:
    h = Harness(clock, partitions=4)
    _, pid, epoch = await h.coord.init_producer_id("tx", 60000)
    partition = h.coord.partition_for("tx")
    await h.coord.add_partitions("tx", pid, epoch, [("t", 0)])
    h.coord.unload(partition)
    assert h.coord.ownership("tx") == E.not_coordinator
    assert "tx" not in h.coord.txns
    assert await h.coord.end_txn("tx", pid, epoch, True) == E.not_coordinator
    assert (await h.coord.init_producer_id("tx", 60000))[0] == E.not_coordinator
    h.coord.begin_load(partition, 7)  # led again, at a later leader epoch
    assert h.coord.ownership("tx") == E.coordinator_load_in_progress
    assert await h.coord.end_txn("tx", pid, epoch, True) == E.coordinator_load_in_progress
    records = [(rec.decode_key(k), None if v is None else rec.decode_value(v))
               for p, k, v in h.log if p == partition]  # fmt: skip
    assert h.coord.finish_load(partition, 6, records) == []  # a superseded load: ignored
    assert h.coord.ownership("tx") == E.coordinator_load_in_progress
    h.coord.finish_load(partition, 7, records)
    assert h.coord.txns["tx"].state is TxnState.ONGOING
    assert await h.coord.end_txn("tx", pid, epoch, True) == E.none
    assert h.markers[-1] == TxnMarker(pid, epoch, True, 7, (("t", 0),))  # the coordinator epoch


@run
async def test_failed_append_changes_nothing_and_maps_errors(clock: FakeClock) -> None:
    h = Harness(clock)
    _, pid, epoch = await h.coord.init_producer_id("tx", 60000)
    h.fail_append = E.not_enough_replicas  # min ISR not met: retriable for the client
    assert await h.coord.add_partitions("tx", pid, epoch, [("t", 0)]) == E.coordinator_not_available
    assert h.coord.txns["tx"].state is TxnState.EMPTY
    h.fail_append = E.not_leader_or_follower  # deposed while appending
    assert await h.coord.add_partitions("tx", pid, epoch, [("t", 0)]) == E.not_coordinator
    h.fail_append = None
    assert await h.coord.add_partitions("tx", pid, epoch, [("t", 0)]) == E.none


@run
async def test_a_store_outlived_by_a_reload_is_dropped(clock: FakeClock) -> None:
    h = Harness(clock)
    _, pid, epoch = await h.coord.init_producer_id("tx", 60000)
    partition = h.coord.partition_for("tx")
    pending = asyncio.ensure_future(h.coord.add_partitions("tx", pid, epoch, [("t", 0)]))
    await asyncio.sleep(0)  # the append is in flight ...
    assert await h.coord.add_partitions("tx", pid, epoch, [("t", 1)]) == E.concurrent_transactions
    h.coord.begin_load(partition, 1)  # ... when the partition is led anew
    assert await pending == E.not_coordinator


@run
async def test_verify_only_answers_per_partition_as_a_leader_needs(clock: FakeClock) -> None:
    """AddPartitionsToTxn v4 verify_only (a leader on another broker asking, KIP-890)."""
    h = Harness(clock, partitions=4)
    _, pid, epoch = await h.coord.init_producer_id("tx", 60000)
    await h.coord.add_partitions("tx", pid, epoch, [("t", 0)])
    wanted = [("t", 0), ("t", 1)]
    assert h.coord.verify("tx", pid, epoch, wanted) == {("t", 0): E.none,
                                                        ("t", 1): E.invalid_txn_state}
    # Kafka's handleVerifyPartitionsInTransaction: a zombie's older epoch is fenced (its
    # leader answers INVALID_PRODUCER_EPOCH), another producer id is not this id's
    assert h.coord.verify("tx", pid, epoch - 1, wanted) == dict.fromkeys(wanted, E.producer_fenced)
    assert h.coord.verify("tx", pid + 1, epoch, wanted) == dict.fromkeys(
        wanted, E.invalid_producer_id_mapping)
    assert h.coord.verify("other", pid, epoch, wanted) == dict.fromkeys(
        wanted, E.invalid_producer_id_mapping)
    assert h.coord.verify_producer(pid, epoch - 1, ("t", 0)) == E.producer_fenced
    assert h.coord.verify_producer(pid, epoch, ("t", 0)) == E.none
    assert h.coord.verify_producer(pid + 1, epoch, ("t", 0)) == E.invalid_txn_state
    assert await h.coord.end_txn("tx", pid, epoch, True) == E.none
    assert h.coord.verify("tx", pid, epoch, wanted) == dict.fromkeys(wanted, E.invalid_txn_state)
    h.coord.unload(h.coord.partition_for("tx"))
    assert h.coord.verify("tx", pid, epoch, wanted) == dict.fromkeys(wanted, E.not_coordinator)
    assert len(h.log) == 4  # verifying writes nothing (init, add, prepare, complete)


def test_verification_answers_become_kafkas_produce_codes() -> None:
    """Kafka's AddPartitionsToTxnManager / ReplicaManager mapping for a produce."""
    from strom.broker.txn.verification import produce_code

    assert produce_code(E.none) == E.none
    assert produce_code(E.producer_fenced) == E.invalid_producer_epoch  # fatal for clients
    assert produce_code(E.invalid_producer_epoch) == E.invalid_producer_epoch
    assert produce_code(E.invalid_txn_state) == E.invalid_txn_state
    assert produce_code(E.transaction_abortable) == E.invalid_txn_state
    assert produce_code(E.invalid_producer_id_mapping) == E.invalid_producer_id_mapping
    for retriable in (E.concurrent_transactions, E.not_coordinator, E.network_exception,
                      E.coordinator_load_in_progress, E.coordinator_not_available):
        assert produce_code(retriable) == E.not_enough_replicas
