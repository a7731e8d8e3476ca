"""Producer state: expiry (producer.id.expiration.ms), open transactions, snapshots."""

from __future__ import annotations

import json
from pathlib import Path

from strom.clock import FakeClock
from strom.protocol.record_batch import build_batch
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
    doc = json.loads((log.dir / f"{offsets[-1]:020d}.snapshot").read_text())
    return {p["pid"] for p in doc["producers"]}


def test_maintenance_expires_idle_producers_but_not_open_transactions(
    tmp_path: Path, clock: FakeClock
) -> None:
    mgr = LogManager(tmp_path, clock, {"producer.id.expiration.ms": "1000"})
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
    log.append(commit_marker(clock, 43))  # the transaction ends; idle from now on
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
    log.append(commit_marker(clock, 43))
    assert log.producer_state.producers[43].txn_first_offset == -1
    clock.advance(1000)
    assert log.remove_expired_producers() == 1
    log.close()
