"""The high-watermark checkpoint: Kafka's replication-offset-checkpoint format, read at start."""

from __future__ import annotations

from pathlib import Path

from strom.clock import FakeClock
from strom.protocol.record_batch import build_batch
from strom.replication.replica_manager import HW_CHECKPOINT_FILE, ReplicaManager
from strom.storage.log_manager import LogManager


def test_hw_survives_a_restart_below_the_log_end(tmp_path: Path) -> None:
    clock = FakeClock()
    logs = LogManager(tmp_path, clock, {})
    replicas = ReplicaManager(logs, 1, clock)
    log = logs.create("t", 0, {})
    logs.create("u", 2, {})  # hosted, empty: checkpointed too (led or not)
    log.append(build_batch([(b"k", b"v", [], 0)] * 5), leader_epoch=0)
    log.high_watermark = 3  # a follower's: offsets 3-4 not committed yet
    replicas.checkpoint_hw()
    assert (tmp_path / HW_CHECKPOINT_FILE).read_text() == "0\n2\nt 0 3\nu 2 0\n"
    logs.close_all()

    again = LogManager(tmp_path, clock, {})
    again.load(lambda _t: {})
    reopened = again.get("t", 0)
    assert reopened is not None and reopened.high_watermark == 5  # the log alone says its end
    ReplicaManager(again, 1, clock).load_hw_checkpoint()
    assert reopened.high_watermark == 3
    again.close_all()
