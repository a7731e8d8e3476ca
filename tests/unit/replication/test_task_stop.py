"""Broker loops stop when closed even if Python 3.11 loses their cancellation.

``asyncio.wait_for`` on 3.11 returns the inner result when it completed in the loop iteration
of the cancellation (CPython gh-86296). A replica fetcher woken (a LeaderAndIsr just made this
broker a follower) and closed right away kept looping, and the broker's shutdown awaited it for
ever (CI: a broker SIGTERMed right after its controlled shutdown never exited). Before the fix,
``test_fetcher_closes_right_after_a_wake`` hung for 0 and 1 loop turns between the wake and
the close.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import SimpleNamespace
from typing import Any

import pytest

from strom.replication.isr_changes import IsrChangeManager
from strom.replication.replica_fetcher import FetcherConfig, ReplicaFetcherManager
from strom.replication.task_stop import cancel_and_wait

BOUND_S = 3.0  # far above what a close takes; the old code never returned


async def _closes_within(close: Any, seconds: float) -> bool:
    """Whether ``close`` (a coroutine) returns within ``seconds`` by itself. Not wait_for: its
    timeout would cancel the close, which passes the cancellation on to the task being
    closed and so ends it, hiding the hang."""
    task = asyncio.ensure_future(close)
    done, _ = await asyncio.wait({task}, timeout=seconds)
    if not done:
        task.cancel()  # clean up: a second cancellation does reach the task
        await asyncio.wait({task}, timeout=seconds)
    return bool(done)


async def _turns(n: int) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def _swallowing_loop(wake: asyncio.Event, turns: list[int]) -> Any:
    """A loop that waits with wait_for as the fetcher does, with no closed flag."""

    async def run() -> None:
        while True:
            turns.append(1)
            wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), 1.0)

    return run()


@pytest.mark.parametrize("gap", range(4))
def test_cancel_and_wait_ends_a_loop_that_lost_its_cancellation(gap: int) -> None:
    async def main() -> tuple[bool, bool]:
        wake = asyncio.Event()
        turns: list[int] = []
        task = asyncio.get_running_loop().create_task(_swallowing_loop(wake, turns))
        await _turns(3)
        wake.set()
        await _turns(gap)
        ended = await cancel_and_wait(task, "test loop", BOUND_S)
        return ended, task.done()

    ended, done = asyncio.run(main())
    assert ended and done


def test_cancel_and_wait_gives_up_after_its_timeout() -> None:
    async def main() -> tuple[bool, bool]:
        stop = asyncio.Event()

        async def stubborn() -> None:  # ignores every cancellation until told to stop
            while not stop.is_set():
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.sleep(1)

        task = asyncio.get_running_loop().create_task(stubborn())
        await _turns(2)
        ended = await cancel_and_wait(task, "stubborn loop", 0.3)
        running = not task.done()
        stop.set()
        task.cancel()
        await asyncio.wait({task}, timeout=2)
        return ended, running

    ended, running = asyncio.run(main())
    assert not ended and running


@pytest.mark.parametrize("gap", range(6))
def test_fetcher_closes_right_after_a_wake(gap: int) -> None:
    """A fetcher with one partition whose leader has no known address sleeps with wait_for;
    it is woken, then closed ``gap`` loop turns later."""

    async def main() -> bool:
        replicas = SimpleNamespace(cache=SimpleNamespace(broker=lambda _id: None), node_id=2)
        manager = ReplicaFetcherManager(replicas, FetcherConfig(backoff_ms=1000))  # type: ignore[arg-type]
        manager.add(("t", 0), 1, 5)
        await _turns(3)
        fetcher = manager.fetchers[1]
        fetcher.wake.set()
        await _turns(gap)
        closed = await _closes_within(manager.close(), BOUND_S)
        return closed and fetcher.done

    assert asyncio.run(main())


def test_alter_partition_sender_closes_after_a_proposal_wake() -> None:
    async def main() -> bool:
        replicas = SimpleNamespace(node_id=1, partitions={})
        manager = IsrChangeManager(replicas, lambda _t: None, lag_ms=30000)  # type: ignore[arg-type]
        manager.start()
        await _turns(2)
        manager._wake.set()  # as a proposal does
        closed = await _closes_within(manager.close(), BOUND_S)
        return closed and manager._task is not None and manager._task.done()

    assert asyncio.run(main())
