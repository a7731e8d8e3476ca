"""Transactions in storage: last stable offset, the aborted-transaction index (.txnindex) and
its rebuild after a crash, markers appended by the coordinator."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from strom.clock import FakeClock
from strom.protocol.control import build_marker, parse_marker
from strom.protocol.record_batch import build_batch
from strom.storage import checkpoint as ckpt
from strom.storage.batch_validation import AppendOrigin
from strom.storage.errors import InvalidProducerEpochError, InvalidRecordError
from strom.storage.log import Log
from strom.storage.log_config import LogConfig
from strom.storage.txn_index import ENTRY_SIZE, AbortedTxn, TransactionIndex

# the record walks run on the native codec and on its pure-Python fallback
pytestmark = pytest.mark.usefixtures("record_codec")


def data(clock: FakeClock, pid: int, seq: int, n: int = 1, *, epoch: int = 0,
         txn: bool = True) -> bytes:  # fmt: skip
    return build_batch([(b"k", b"v%d" % i, [], clock.time_ms()) for i in range(n)],
                       producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                       is_transactional=txn)  # fmt: skip


def marker(clock: FakeClock, pid: int, commit: bool, epoch: int = 0) -> bytes:
    return build_marker(pid, epoch, commit=commit, coordinator_epoch=3,
                        timestamp_ms=clock.time_ms())  # fmt: skip


def open_log(path: Path, clock: FakeClock, **cfg: int) -> Log:
    return Log.open(path, LogConfig(**cfg), clock)


def append(log: Log, records: bytes, origin: AppendOrigin = AppendOrigin.CLIENT) -> int:
    result = log.append(records, origin=origin)
    log.high_watermark = log.log_end_offset
    return result.base_offset


def test_marker_round_trip() -> None:
    m = parse_marker(build_marker(7, 2, commit=True, coordinator_epoch=9, timestamp_ms=1))
    assert m is not None and m.commit and m.coordinator_epoch == 9
    m = parse_marker(build_marker(7, 2, commit=False, coordinator_epoch=0, timestamp_ms=1))
    assert m is not None and not m.commit


def test_lso_follows_open_transactions(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path / "t-0", clock)
    append(log, data(clock, 1, 0, txn=False))  # offset 0, plain idempotent
    assert log.last_stable_offset == 1
    append(log, data(clock, 10, 0, 2))  # txn A: 1..2
    append(log, data(clock, 11, 0))  # txn B: 3
    append(log, data(clock, 10, 2))  # txn A: 4
    assert log.last_stable_offset == 1
    append(log, marker(clock, 10, True), AppendOrigin.COORDINATOR)  # 5: A commits
    assert log.last_stable_offset == 3  # B still open
    assert log.producer_state.producers[10].coordinator_epoch == 3
    append(log, marker(clock, 11, False), AppendOrigin.COORDINATOR)  # 6: B aborts
    assert log.last_stable_offset == 7 == log.high_watermark
    assert log.collect_aborted(0, 7) == [AbortedTxn(11, 3, 6, 7)]
    assert log.collect_aborted(4, 7) == [AbortedTxn(11, 3, 6, 7)]  # overlaps
    assert log.collect_aborted(7, 10) == []
    assert log.collect_aborted(0, 3) == []  # the range ends before the txn starts
    log.high_watermark = 3  # the LSO never exceeds the high watermark
    assert log.last_stable_offset == 3


def test_clients_cannot_write_markers_and_fenced_markers_are_refused(
    tmp_path: Path, clock: FakeClock
) -> None:
    log = open_log(tmp_path / "t-0", clock)
    append(log, data(clock, 10, 0, epoch=5))
    with pytest.raises(InvalidRecordError):
        log.append(marker(clock, 10, True, epoch=5))
    with pytest.raises(InvalidProducerEpochError):
        log.append(marker(clock, 10, False, epoch=4), origin=AppendOrigin.COORDINATOR)
    assert log.last_stable_offset == 0
    # a marker with a bumped epoch (abort after a timeout) ends the transaction
    append(log, marker(clock, 10, False, epoch=6), AppendOrigin.COORDINATOR)
    assert log.last_stable_offset == 2
    assert log.collect_aborted(0, 2) == [AbortedTxn(10, 0, 1, 2)]


def test_marker_without_data_adds_no_entry(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path / "t-0", clock)
    append(log, marker(clock, 10, False), AppendOrigin.COORDINATOR)
    assert log.collect_aborted(0, 10) == []
    assert not log.active.txn_index.path.exists()


def test_txnindex_file_format_and_segments(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path / "t-0", clock)
    append(log, data(clock, 10, 0))
    log.roll()
    append(log, marker(clock, 10, False), AppendOrigin.COORDINATOR)  # marker in 2nd segment
    path = tmp_path / "t-0" / f"{1:020d}.txnindex"
    raw = path.read_bytes()
    assert len(raw) == ENTRY_SIZE
    assert raw == (b"\x00\x00" + (10).to_bytes(8, "big") + (0).to_bytes(8, "big")
                   + (1).to_bytes(8, "big") + (2).to_bytes(8, "big"))  # fmt: skip
    assert not (tmp_path / "t-0" / f"{0:020d}.txnindex").exists()
    assert log.collect_aborted(0, 1) == [AbortedTxn(10, 0, 1, 2)]  # found in a later segment
    log.close()
    log = open_log(tmp_path / "t-0", clock)  # clean reopen: kept as is
    assert log.collect_aborted(0, 5) == [AbortedTxn(10, 0, 1, 2)]
    log.truncate_to(1)  # the marker goes, so does its entry; the txn is open again
    assert log.collect_aborted(0, 5) == []
    assert not path.exists() or path.read_bytes() == b""
    assert log.last_stable_offset == 0


def test_crash_rebuilds_txnindex_and_open_transactions(tmp_path: Path, clock: FakeClock) -> None:
    d = tmp_path / "t-0"
    log = open_log(d, clock)
    append(log, data(clock, 10, 0, 3))  # 0..2
    append(log, data(clock, 11, 0))  # 3
    append(log, marker(clock, 10, False), AppendOrigin.COORDINATOR)  # 4
    append(log, data(clock, 12, 0))  # 5 stays open
    log.flush()
    # simulate a crash: no clean-shutdown marker, no snapshot, the index file lost
    (d / f"{0:020d}.txnindex").unlink()
    for s in log.producer_state.snapshot_offsets():
        (d / f"{s:020d}.snapshot").unlink()
    log2 = open_log(d, clock)
    log2.high_watermark = log2.log_end_offset
    assert log2.collect_aborted(0, 6) == [AbortedTxn(10, 0, 4, 3)]
    assert log2.producer_state.producers[10].coordinator_epoch == 3  # from the marker
    assert log2.last_stable_offset == 3  # pid 11 (3) and 12 (5) still open
    append(log2, marker(clock, 11, True), AppendOrigin.COORDINATOR)
    append(log2, marker(clock, 12, True), AppendOrigin.COORDINATOR)
    assert log2.last_stable_offset == log2.log_end_offset == 8


def test_crash_with_torn_marker_drops_its_entry(tmp_path: Path, clock: FakeClock) -> None:
    d = tmp_path / "t-0"
    log = open_log(d, clock, flush_messages=1)
    append(log, data(clock, 10, 0))
    append(log, marker(clock, 10, False), AppendOrigin.COORDINATOR)
    seg = d / f"{0:020d}.log"
    os.truncate(seg, seg.stat().st_size - 3)  # the marker is torn by the crash
    (d / ckpt.RECOVERY_POINT_FILE).unlink()
    log2 = open_log(d, clock)
    log2.high_watermark = log2.log_end_offset
    assert log2.log_end_offset == 1
    assert log2.collect_aborted(0, 5) == []
    assert log2.last_stable_offset == 0  # the transaction is open again


def test_transaction_index_ignores_torn_entry(tmp_path: Path) -> None:
    path = tmp_path / "x.txnindex"
    idx = TransactionIndex(path)
    idx.append(AbortedTxn(1, 0, 5, 6))
    idx.append(AbortedTxn(2, 3, 9, 10))
    with pytest.raises(ValueError):
        idx.append(AbortedTxn(3, 3, 9, 10))
    with open(path, "ab") as f:
        f.write(b"\x00\x00\x01")
    again = TransactionIndex(path)
    assert again.entries == [AbortedTxn(1, 0, 5, 6), AbortedTxn(2, 3, 9, 10)]
    assert path.stat().st_size == 2 * ENTRY_SIZE
    assert again.collect(6, 100) == [AbortedTxn(2, 3, 9, 10)]
