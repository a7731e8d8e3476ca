"""Periodic broker work visits only what changed, not every partition (issue 6: ack latency
at 10,000 partitions): the ISR shrink check, the high-watermark checkpoint, the cleaner's
choice of logs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from strom.clock import FakeClock
from strom.protocol.record_batch import build_batch
from strom.replication.commands import PartitionRole
from strom.replication.isr_changes import IsrChangeManager
from strom.replication.partition import Partition
from strom.replication.replica_manager import HW_CHECKPOINT_FILE, ReplicaManager
from strom.storage.log_manager import LogManager


class CountingFlusher:
    """Runs each job inline and counts them: a checkpoint that writes nothing submits none."""

    def __init__(self) -> None:
        self.jobs = 0

    def submit(self, job: Callable[[], None]) -> Any:
        self.jobs += 1
        job()

    def drain(self) -> None:
        pass

    def close(self) -> None:
        pass


def _state(topic: str, index: int, leader: int, epoch: int, isr: tuple[int, ...],
           replicas: tuple[int, ...]) -> PartitionRole:  # fmt: skip
    return PartitionRole(topic, index, leader, epoch, isr, epoch, replicas)


def _records(n: int = 1) -> bytes:
    return build_batch([(b"k", b"v", [], 0)] * n)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def replicas(tmp_path: Path, clock: FakeClock) -> ReplicaManager:
    return ReplicaManager(LogManager(tmp_path, clock, {}), 1, clock)


def _checkpoint(path: Path) -> list[str]:
    return (path / HW_CHECKPOINT_FILE).read_text().splitlines()


def test_hw_checkpoint_writes_only_after_a_change(tmp_path: Path, replicas: ReplicaManager
                                                  ) -> None:  # fmt: skip
    flusher = CountingFlusher()
    replicas.logs.flusher = flusher  # type: ignore[assignment]
    for index in range(3):  # a single node: each its own leader, alone in the ISR
        replicas.become_leader_or_follower(_state("t", index, 1, 0, (1,), (1,)), 1, {})
    replicas.checkpoint_hw_async()
    assert flusher.jobs == 1
    assert _checkpoint(tmp_path) == ["0", "3", "t 0 0", "t 1 0", "t 2 0"]

    replicas.checkpoint_hw_async()  # nothing changed: no write at all
    assert flusher.jobs == 1

    replicas.append("t", 1, _records(2))  # one partition's HW moves: the file lists all
    replicas.append("t", 1, _records(2))
    replicas.checkpoint_hw_async()
    assert flusher.jobs == 2
    assert _checkpoint(tmp_path) == ["0", "3", "t 0 0", "t 1 4", "t 2 0"]
    replicas.checkpoint_hw_async()
    assert flusher.jobs == 2

    log = replicas.logs.get("t", 1)
    assert log is not None
    log.truncate_to(2)  # a truncation (to the second batch) lowers the HW: marked too
    replicas.checkpoint_hw_async()
    assert flusher.jobs == 3
    assert _checkpoint(tmp_path) == ["0", "3", "t 0 0", "t 1 2", "t 2 0"]

    replicas.stop_replica("t", 2, -1, delete=True)  # a removed partition leaves the file
    for gone in replicas.take_deleted():
        gone.close()
    replicas.checkpoint_hw_async()
    assert flusher.jobs == 4
    assert _checkpoint(tmp_path) == ["0", "2", "t 0 0", "t 1 2"]
    replicas.logs.close_all()


def test_hw_checkpoint_load_drops_stale_entries_once(tmp_path: Path, clock: FakeClock) -> None:
    logs = LogManager(tmp_path, clock, {})
    logs.create("t", 0, {}).append(_records(3), leader_epoch=0)
    (tmp_path / HW_CHECKPOINT_FILE).write_text("0\n2\nt 0 2\ngone 0 7\n")
    replicas = ReplicaManager(logs, 1, clock)
    flusher = CountingFlusher()
    logs.flusher = flusher  # type: ignore[assignment]
    replicas.load_hw_checkpoint()
    log = logs.get("t", 0)
    assert log is not None and log.high_watermark == 2
    replicas.checkpoint_hw_async()  # the file names a partition no longer hosted: rewritten
    assert flusher.jobs == 1
    assert _checkpoint(tmp_path) == ["0", "1", "t 0 2"]
    replicas.checkpoint_hw_async()
    assert flusher.jobs == 1
    logs.close_all()


def test_shrink_check_visits_only_leaders_with_isr_followers(
    replicas: ReplicaManager, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    isr = IsrChangeManager(replicas, lambda _t: None, lag_ms=10_000)
    visited: list[tuple[str, int]] = []
    original = Partition.out_of_sync_replicas

    def spy(self: Partition, lag_ms: int) -> list[int]:
        visited.append((self.topic, self.index))
        return original(self, lag_ms)

    monkeypatch.setattr(Partition, "out_of_sync_replicas", spy)
    for index in range(100):  # led alone (a single node's every partition)
        replicas.become_leader_or_follower(_state("solo", index, 1, 0, (1,), (1,)), 1, {})
    replicas.become_leader_or_follower(_state("rf2", 0, 1, 0, (1, 2), (1, 2)), 1, {})
    replicas.become_leader_or_follower(_state("rf2", 1, 2, 0, (1, 2), (1, 2)), 1, {})  # follower
    assert set(replicas.with_isr_followers) == {("rf2", 0)}

    isr.shrink_check()
    assert visited == [("rf2", 0)]  # in sync: nothing proposed
    part = replicas.partitions[("rf2", 0)]
    assert part.pending is None

    clock.advance(10_001)  # follower 2 has not fetched for longer than the lag limit
    visited.clear()
    isr.shrink_check()
    assert visited == [("rf2", 0)]
    assert part.pending is not None and part.pending.proposed == (1,)

    part.apply_isr((1,), 0, 1)  # the controller's answer: alone now, no longer visited
    visited.clear()
    isr.shrink_check()
    assert visited == [] and not replicas.with_isr_followers

    # the follower comes back into the ISR: visited again
    replicas.become_leader_or_follower(_state("rf2", 0, 1, 1, (1, 2), (1, 2)), 1, {})
    isr.shrink_check()
    assert visited == [("rf2", 0)]
    replicas.stop_replica("rf2", 0, -1, delete=False)  # no longer hosted: dropped
    visited.clear()
    isr.shrink_check()
    assert visited == [] and not replicas.with_isr_followers
    replicas.logs.close_all()


def test_compacted_logs_follow_configs(tmp_path: Path, clock: FakeClock) -> None:
    logs = LogManager(tmp_path, clock, {})
    for index in range(5):
        logs.create("plain", index, {})
    logs.create("keyed", 0, {"cleanup.policy": "compact"})
    assert [tp for tp, _ in logs.compacted_logs()] == [("keyed", 0)]
    logs.update_topic_config("plain", {"cleanup.policy": "compact,delete"})
    assert sorted(tp for tp, _ in logs.compacted_logs()) == [
        ("keyed", 0), *(("plain", i) for i in range(5))]  # fmt: skip
    logs.update_topic_config("plain", {})
    logs.delete("keyed", 0)
    assert logs.compacted_logs() == []
    logs.update_broker_configs({"log.cleanup.policy": "compact"})  # the broker's default
    assert len(logs.compacted_logs()) == 5
    logs.close_all()
