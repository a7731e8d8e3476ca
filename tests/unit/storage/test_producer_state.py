"""Producer state: expiry (producer.id.expiration.ms), open transactions, snapshots, and
sequence rules for producers with no state (Kafka >= 2.5)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from strom.clock import FakeClock
from strom.protocol.record_batch import build_batch
from strom.storage import producer_snapshot
from strom.storage.batch_validation import AppendOrigin
from strom.storage.errors import (
    InvalidProducerEpochError,
    InvalidRecordError,
    OutOfOrderSequenceError,
)
from strom.storage.log import Log
from strom.storage.log_config import LogConfig
from strom.storage.log_manager import LogManager

COMMIT_KEY = b"\x00\x00\x00\x01"  # control record: version 0, type 1 (commit)
MARKER_VALUE = b"\x00\x00\x00\x00\x00\x00"  # version 0, coordinator epoch 0


def pbatch(clock: FakeClock, pid: int, seq: int, *, txn: bool = False) -> bytes:
    return build_batch([(b"k", b"v", [], clock.time_ms())], producer_id=pid, producer_epoch=0,
                       base_sequence=seq, is_transactional=txn)  # fmt: skip


def commit_marker(clock: FakeClock, pid: int) -> bytes:
    return build_batch([(COMMIT_KEY, MARKER_VALUE, [], clock.time_ms())], producer_id=pid,
                       producer_epoch=0, is_transactional=True, is_control=True)  # fmt: skip


def snapshot_pids(log: Log) -> set[int]:
    offsets = log.producer_state.snapshot_offsets()
    entries = producer_snapshot.read(log.dir / f"{offsets[-1]:020d}.snapshot")
    return {e.producer_id for e in entries}


def test_maintenance_expires_idle_producers_but_not_open_transactions(
    tmp_path: Path, clock: FakeClock
) -> None:
    mgr = LogManager(
        tmp_path,
        clock,
        {"producer.id.expiration.ms": "1000", "producer.id.expiration.check.interval.ms": "0"},
    )
    log = mgr.create("t", 0, {})
    log.append(pbatch(clock, 42, 0))
    log.append(pbatch(clock, 43, 0, txn=True))  # transaction stays open
    clock.advance(999)
    log.append(pbatch(clock, 44, 0))
    mgr.maintenance()
    assert set(log.producer_state.producers) == {42, 43, 44}  # 999 ms idle: not yet
    clock.advance(1)
    mgr.maintenance()
    assert set(log.producer_state.producers) == {43, 44}  # >= expiration, as Kafka
    log.append(commit_marker(clock, 43), origin=AppendOrigin.COORDINATOR)  # the transaction ends; idle from now on
    clock.advance(1000)
    mgr.maintenance()
    assert log.producer_state.producers == {}
    log.append(pbatch(clock, 45, 0))
    log.roll()  # roll snapshots the producer state
    assert snapshot_pids(log) == {45}
    mgr.close_all()


def test_snapshot_after_expiry_leaves_expired_producers_out(
    tmp_path: Path, clock: FakeClock
) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig(), clock, producer_id_expiration_ms=1000)
    log.append(pbatch(clock, 42, 0))
    clock.advance(500)
    log.append(pbatch(clock, 43, 0))
    log.close()
    assert snapshot_pids(log) == {42, 43}
    clock.advance(600)
    log = Log.open(tmp_path / "t-0", LogConfig(), clock, producer_id_expiration_ms=1000)
    assert set(log.producer_state.producers) == {43}  # expired while the log was closed
    log.close()
    assert snapshot_pids(log) == {43}


def test_open_transaction_survives_snapshot_and_expiry(tmp_path: Path, clock: FakeClock) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig(), clock, producer_id_expiration_ms=1000)
    log.append(pbatch(clock, 43, 0, txn=True))
    log.close()
    clock.advance(5000)
    log = Log.open(tmp_path / "t-0", LogConfig(), clock, producer_id_expiration_ms=1000)
    assert log.remove_expired_producers() == 0
    assert log.producer_state.producers[43].txn_first_offset == 0
    log.append(commit_marker(clock, 43), origin=AppendOrigin.COORDINATOR)
    assert log.producer_state.producers[43].txn_first_offset == -1
    clock.advance(1000)
    assert log.remove_expired_producers() == 1
    log.close()


def ebatch(clock: FakeClock, seq: int, epoch: int = 0, n: int = 1, pid: int = 42) -> bytes:
    recs = [(b"k", b"v", [], clock.time_ms()) for _ in range(n)]
    return build_batch(recs, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def test_unknown_producer_accepted_at_any_sequence_then_checked(
    open_log: Callable[..., Log], clock: FakeClock
) -> None:
    """Kafka >= 2.5 (KIP-360): no state → accept; then sequences and epochs are enforced."""
    log = open_log()
    assert log.append(ebatch(clock, 7, epoch=3)).base_offset == 0
    with pytest.raises(OutOfOrderSequenceError):
        log.append(ebatch(clock, 9, epoch=3))
    assert log.append(ebatch(clock, 7, epoch=3)).duplicate
    assert log.append(ebatch(clock, 8, epoch=3)).base_offset == 1
    with pytest.raises(InvalidProducerEpochError):
        log.append(ebatch(clock, 9, epoch=2))
    with pytest.raises(OutOfOrderSequenceError):
        log.append(ebatch(clock, 5, epoch=4))  # a new epoch starts at 0
    assert log.append(ebatch(clock, 0, epoch=4)).base_offset == 2


def test_expired_producer_may_resume_at_its_sequence(
    open_log: Callable[..., Log], clock: FakeClock
) -> None:
    log = open_log()
    log.producer_state.expiration_ms = 1000
    for seq in range(3):
        log.append(ebatch(clock, seq))
    clock.advance(1000)
    assert log.remove_expired_producers() == 1
    assert log.append(ebatch(clock, 3)).base_offset == 3  # no state: accepted, not an error
    with pytest.raises(OutOfOrderSequenceError):
        log.append(ebatch(clock, 5))


def test_entry_without_batches_needs_sequence_zero(
    open_log: Callable[..., Log], clock: FakeClock
) -> None:
    """A marker with a newer epoch (coordinator abort after a bump) leaves an entry without
    batches; the producer's next batch in that epoch must start at 0, as Kafka checks."""
    log = open_log()
    log.append(ebatch(clock, 0, pid=43))
    marker = build_batch([(COMMIT_KEY, MARKER_VALUE, [], clock.time_ms())], producer_id=43,
                         producer_epoch=1, is_transactional=True, is_control=True)  # fmt: skip
    log.append(marker, origin=AppendOrigin.COORDINATOR)
    with pytest.raises(OutOfOrderSequenceError):
        log.append(ebatch(clock, 1, epoch=1, pid=43))
    assert log.append(ebatch(clock, 0, epoch=1, pid=43)).base_offset == 2


def test_several_batches_in_one_client_append_are_refused(
    open_log: Callable[..., Log], clock: FakeClock
) -> None:
    """Kafka refuses a produce request with several batches for one partition; nothing of
    them is stored and the producer's state does not move."""
    log = open_log()
    with pytest.raises(InvalidRecordError):
        log.append(ebatch(clock, 4, n=2) + ebatch(clock, 6, n=3))
    assert log.log_end_offset == 0 and 42 not in log.producer_state.producers
    assert log.append(ebatch(clock, 4, n=2)).base_offset == 0
    assert log.append(ebatch(clock, 6)).base_offset == 2
    with pytest.raises(OutOfOrderSequenceError):  # a gap
        log.append(ebatch(clock, 9))
    assert log.log_end_offset == 3 and log.append(ebatch(clock, 6)).duplicate


def test_expiry_runs_every_check_interval(tmp_path: Path, clock: FakeClock) -> None:
    mgr = LogManager(tmp_path, clock, {"producer.id.expiration.ms": "10"})  # check: 600000
    log = mgr.create("t", 0, {})
    log.append(pbatch(clock, 42, 0))
    clock.advance(599_999)
    mgr.maintenance()
    assert 42 in log.producer_state.producers
    clock.advance(1)
    mgr.maintenance()
    assert 42 not in log.producer_state.producers
    mgr.close_all()


def test_snapshot_is_kafkas_binary_format(open_log: Callable[..., Log], clock: FakeClock) -> None:
    """version 1, CRC-32C of the rest, int32 count, 46-byte entries (Kafka's ProducerSnapshot)."""
    import struct

    import crc32c

    log = open_log()
    log.append(ebatch(clock, 0, n=2))
    log.append(ebatch(clock, 2, n=3, epoch=0))
    log.close()
    (offset,) = log.producer_state.snapshot_offsets()[-1:]
    data = (log.dir / f"{offset:020d}.snapshot").read_bytes()
    version, crc, count = struct.unpack_from(">hIi", data)
    assert (version, count, len(data)) == (1, 1, 10 + 46)
    assert crc == crc32c.crc32c(data[6:])
    entry = struct.unpack_from(">qhiqiqiq", data, 10)
    # pid, epoch, last seq, last offset, offset delta, timestamp, coordinator epoch, txn first
    assert entry == (42, 0, 4, 4, 2, clock.time_ms(), -1, -1)
    assert not list(log.dir.glob("*.tmp"))
    # reopened: the last batch deduplicates, the next sequence follows on
    again = Log.open(log.dir, log.config, clock)
    assert again.append(ebatch(clock, 2, n=3)).duplicate
    assert again.append(ebatch(clock, 5)).base_offset == 5


def test_corrupt_snapshot_falls_back_to_replaying_the_log(
    open_log: Callable[..., Log], clock: FakeClock
) -> None:
    log = open_log()
    log.append(ebatch(clock, 0))
    log.append(ebatch(clock, 1))
    log.close()
    (offset,) = log.producer_state.snapshot_offsets()[-1:]
    path = log.dir / f"{offset:020d}.snapshot"
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    again = Log.open(log.dir, log.config, clock)
    assert not path.exists()
    assert again.append(ebatch(clock, 1)).duplicate  # rebuilt from the batches
    assert again.append(ebatch(clock, 2)).base_offset == 2
