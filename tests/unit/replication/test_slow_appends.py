"""ReplicaManager.append_later: a slow log directory's appends, written off the event loop, in
arrival order per partition, answered once part of the log (strom.storage.slow_disk)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from strom.clock import FakeClock
from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.record_batch import build_batch
from strom.replication.commands import PartitionRole
from strom.replication.replica_manager import ReplicaManager
from strom.storage import fileio
from strom.storage.log_manager import LogManager


@pytest.fixture
def replicas(tmp_path: Path) -> ReplicaManager:
    clock = FakeClock()
    return ReplicaManager(LogManager(tmp_path, clock, {}), 1, clock)


def _lead(replicas: ReplicaManager, epoch: int = 1, isr: tuple[int, ...] = (1,)) -> None:
    role = PartitionRole("t", 0, 1, epoch, isr, epoch, (1, 2))
    assert replicas.become_leader_or_follower(role, 1, {}) == ErrorCode.none


def _records(value: bytes, seq: int) -> bytes:
    return build_batch([(b"k", value, [], 0)], producer_id=3, producer_epoch=0,
                       base_sequence=seq)  # fmt: skip


def _stalled(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Writer threads' writes wait for the returned event (a stalled disk)."""
    go = threading.Event()
    real: Callable[..., int] = fileio.pwritev

    def pwritev(fd: int, buffers: Any, position: int) -> int:
        if threading.current_thread().name.startswith("strom-writer"):
            assert go.wait(10)
        return real(fd, buffers, position)

    monkeypatch.setattr(fileio, "pwritev", pwritev)
    return go


def test_appends_to_a_slow_directory_keep_their_order_and_wait_for_the_disk(
        replicas: ReplicaManager, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    go = _stalled(monkeypatch)

    async def run() -> None:
        _lead(replicas)
        part = replicas.leader_partition("t", 0)
        log = part.log
        assert not replicas.must_wait(part)
        log.speed.slow = True  # as a slow write would have marked it
        assert replicas.must_wait(part)
        futures = [replicas.append_later(part, _records(b"v%d" % i, i)) for i in range(3)]
        fetch = replicas.purgatory  # fetchers are woken once the records are readable
        await asyncio.sleep(0.1)
        # the first is being written, the others wait behind it; nothing is readable yet
        assert not any(f.done() for f in futures)
        assert log.in_flight is not None and log.log_end_offset == 0
        assert log.high_watermark == 0
        log.speed.slow = False  # the disk got fast: the partition's queue still goes first
        assert replicas.must_wait(part)
        go.set()
        results = await asyncio.wait_for(asyncio.gather(*futures), 5)
        assert [r.base_offset for r in results] == [0, 1, 2]
        assert log.log_end_offset == 3 and log.high_watermark == 3  # alone in the ISR
        assert "t" not in {k[0] for k in replicas.waiting_appends}
        assert not replicas.must_wait(part) and fetch is replicas.purgatory
        # the next one is written on the loop again
        assert replicas.append_to(part, _records(b"v3", 3)).base_offset == 3

    asyncio.run(run())
    replicas.logs.close_all()


def test_a_queued_append_is_refused_when_leadership_moved_meanwhile(
        replicas: ReplicaManager, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    go = _stalled(monkeypatch)

    async def run() -> None:
        _lead(replicas)
        part = replicas.leader_partition("t", 0)
        part.log.speed.slow = True
        first = replicas.append_later(part, _records(b"a", 0))
        second = replicas.append_later(part, _records(b"b", 1))
        await asyncio.sleep(0.05)
        threading.Timer(0.2, go.set).start()
        # broker 2 leads from epoch 2: the append being written is part of the log before
        # this broker follows (the log settles it first), the waiting one is refused
        role = PartitionRole("t", 0, 2, 2, (1, 2), 2, (1, 2))
        replicas.become_leader_or_follower(role, 1, {})
        assert (await asyncio.wait_for(first, 5)).base_offset == 0
        with pytest.raises(KafkaError) as exc:
            await asyncio.wait_for(second, 5)
        assert exc.value.error_code == ErrorCode.not_leader_or_follower
        assert part.log.log_end_offset == 1 and not replicas.waiting_appends

    asyncio.run(run())
    replicas.logs.close_all()
