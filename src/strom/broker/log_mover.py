"""Moves of partition replicas between this broker's log directories (AlterReplicaLogDirs).

One task per move (:mod:`strom.storage.log_move` has the on-disk protocol and its crash
safety): copy passes run on a worker thread while the replica keeps serving; once a pass
copied less than :data:`FINAL_PASS_BYTES`, the swap runs on the event loop with no ``await``
in between, so no append, fetch or cleaner commit can interleave: close the log (flush,
snapshot, per-partition clean marker), copy the small rest, rename (commit), open the copy and
have the registered :class:`~strom.storage.log.Log` adopt it, so every holder of the object
keeps working. The old directory is removed in the background. A failure before the commit
removes the copy and reopens nothing (the log was not closed) or reopens the original in
place: the original is never touched before the commit. A move waits while the log cleaner
works on the partition; a log that is detached (deleted, reassigned away) ends its move.

A move outlives the process, as in Kafka: a shutdown stops the copy between two chunks and
keeps the ``-future`` directory; at start-up (and after a kill -9) the log manager hands every
``-future`` copy of a partition still live elsewhere to :meth:`LogMover.resume`, which keeps
the bytes of the copy equal to the source (:func:`~strom.storage.log_move.resume_state`)
and goes on copying. The copy's pace is bounded by the dynamic broker config
``replica.alter.log.dirs.io.max.bytes.per.second`` (Kafka's; unbounded by default) for all
moves of the broker together (each gets an equal share), read at every chunk.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from strom.protocol.errors import ErrorCode
from strom.storage import log_move
from strom.storage.log import Log
from strom.storage.log_manager import future_name

if TYPE_CHECKING:
    from strom.broker.log_cleaner import LogCleaner
    from strom.broker.topic_lifecycle import TopicLifecycle
    from strom.config import BrokerConfig
    from strom.storage.log_manager import LogManager

log = logging.getLogger(__name__)
RATE_CONFIG = "replica.alter.log.dirs.io.max.bytes.per.second"
FINAL_PASS_BYTES = 4 << 20  # the swap (on the loop) copies at most about this much
MAX_PASSES = 50  # a partition written faster than it is copied: swap anyway after this


@dataclass
class Move:
    topic: str
    partition: int
    target: Path  # the log directory
    future: Path  # <target>/<topic>-<partition>.<hex>-future
    copied: log_move.FileState = field(default_factory=dict)
    cancelled: bool = False
    resumed: bool = False  # a copy left by an earlier run: what matches the source is kept
    task: asyncio.Task[None] | None = None


def _segments_size(path: Path) -> int:
    """Bytes of the ``.log`` files in a future replica (a few stats: moves are few)."""
    total = 0
    try:
        with os.scandir(path) as entries:
            for e in entries:
                if e.name.endswith(".log"):
                    with contextlib.suppress(FileNotFoundError):  # retention removed it
                        total += e.stat().st_size
    except OSError:
        return 0
    return total


class LogMover:
    def __init__(self, logs: LogManager, config: BrokerConfig, lifecycle: TopicLifecycle,
                 cleaner: LogCleaner) -> None:  # fmt: skip
        self.logs = logs
        self.config = config
        self.lifecycle = lifecycle
        self.cleaner = cleaner
        self.moves: dict[tuple[str, int], Move] = {}
        self.closing = False  # a shutdown: copies stop and are kept for the next start

    def moving(self, topic: str, partition: int) -> tuple[Path, int, int] | None:
        """(target log dir, bytes copied, bytes left) of a move in progress, else None."""
        move = self.moves.get((topic, partition))
        log_ = self.logs.get(topic, partition)
        if move is None or log_ is None:
            return None
        copied = min(_segments_size(move.future), log_.size)  # on disk now, mid-pass too
        return move.target, copied, log_.size - copied

    def start(self, topic: str, partition: int, target: Path) -> ErrorCode:
        """Begin moving the replica to the log directory ``target`` (one of ``log.dirs``)."""
        logs = self.logs
        log_ = logs.get(topic, partition)
        if log_ is None:
            return ErrorCode.replica_not_available
        current = self.moves.get((topic, partition))
        if log_.dir.parent == target:
            if current is not None:
                current.cancelled = True
                del self.moves[(topic, partition)]
            return ErrorCode.none
        if current is not None:
            if current.target == target:
                return ErrorCode.none
            current.cancelled = True
        future = future_name(target / log_.dir.name)
        try:
            if shutil.disk_usage(target).free < log_.size:
                return ErrorCode.kafka_storage_error
            future.mkdir()
        except OSError as exc:
            log.error("cannot start moving %s-%d to %s: %s", topic, partition, target, exc)
            return ErrorCode.kafka_storage_error
        self._launch(Move(topic, partition, target, future), log_)
        log.info("moving %s-%d from %s to %s", topic, partition, log_.dir.parent, target)
        return ErrorCode.none

    def resume(self, futures: dict[tuple[str, int], Path]) -> None:
        """Go on with the moves an earlier run left (``LogManager.futures``, taken)."""
        for (topic, partition), future in sorted(futures.items()):
            log_ = self.logs.get(topic, partition)
            if log_ is None or log_.dir.parent == future.parent:
                self.lifecycle.remove_in_background([future])
                continue
            log.info("resuming the move of %s-%d from %s to %s", topic, partition,
                     log_.dir.parent, future.parent)  # fmt: skip
            self._launch(Move(topic, partition, future.parent, future, resumed=True), log_)
        futures.clear()

    def _launch(self, move: Move, log_: Log) -> None:
        self.moves[(move.topic, move.partition)] = move
        move.task = asyncio.get_running_loop().create_task(self._run(move, log_))

    async def close(self) -> None:
        """Stop every copy (between two chunks) and keep its ``-future`` directory: the next
        start resumes it."""
        self.closing = True
        for move in list(self.moves.values()):
            move.cancelled = True
        tasks = [m.task for m in self.moves.values() if m.task is not None]
        await asyncio.gather(*tasks, return_exceptions=True)

    def _rate(self) -> int:
        """Each copy's share of the broker's rate: Kafka's limit is for all moves together."""
        try:
            rate = int(self.config.get(RATE_CONFIG) or log_move.UNLIMITED)
        except ValueError:
            return log_move.UNLIMITED
        if rate <= 0 or rate >= log_move.UNLIMITED:
            return log_move.UNLIMITED
        return max(1, rate // max(1, len(self.moves)))

    def _current(self, move: Move, log_: Log) -> bool:
        key = (move.topic, move.partition)
        return (not move.cancelled and self.moves.get(key) is move
                and self.logs.get(*key) is log_)  # fmt: skip

    async def _run(self, move: Move, log_: Log) -> None:
        try:
            done = await self._copy_and_swap(move, log_)
        except log_move.CopyStopped:
            done = False
        except Exception:
            log.exception("moving %s-%d to %s failed; the replica stays where it was",
                          move.topic, move.partition, move.target)  # fmt: skip
            done = False
        key = (move.topic, move.partition)
        if self.moves.get(key) is move:
            del self.moves[key]
        if done:
            return
        if self.closing and self.logs.get(*key) is log_:
            log.info("stopped moving %s-%d to %s; %s is kept to resume at the next start",
                     *key, move.target, move.future.name)  # fmt: skip
            return
        await asyncio.to_thread(shutil.rmtree, move.future, True)

    async def _copy_and_swap(self, move: Move, log_: Log) -> bool:
        throttle = log_move.Throttle(self._rate, lambda: not self._current(move, log_))
        if move.resumed:
            truncations = log_.truncations
            move.copied = await asyncio.to_thread(log_move.resume_state, log_.dir, move.future,
                                                  throttle.stopped)  # fmt: skip
            if log_.truncations != truncations:
                move.copied.clear()
            kept = sum(s[1] for s in move.copied.values())
            log.info("resumed moving %s-%d to %s: %d bytes of the earlier copy kept",
                     move.topic, move.partition, move.target, kept)  # fmt: skip
        for _ in range(MAX_PASSES):
            if not self._current(move, log_):
                return False
            truncations = log_.truncations
            written = await asyncio.to_thread(log_move.copy_pass, log_.dir, move.future,
                                              move.copied, throttle=throttle)  # fmt: skip
            if log_.truncations != truncations:
                move.copied.clear()  # a truncated .log may have regrown: copy all again
                continue
            busy = self.cleaner.cleaning == (move.topic, move.partition)
            if written < FINAL_PASS_BYTES and not busy:
                break
            if busy:
                await asyncio.sleep(0.05)
        if not self._current(move, log_):
            return False
        return self._swap(move, log_)

    def _swap(self, move: Move, log_: Log) -> bool:
        """On the loop, no await: nothing else touches the log meanwhile."""
        logs = self.logs
        source = log_.dir
        log_.close(sync=True)  # flush + snapshot + clean marker: the files are final
        try:
            log_move.copy_pass(source, move.future, move.copied)
            live, doomed = log_move.commit(source, move.future)
        except OSError:
            log.exception("moving %s-%d failed before the commit; reopening it in %s",
                          move.topic, move.partition, source.parent)  # fmt: skip
            log_.adopt(Log.open(source, log_.config, logs.clock, flusher=logs.flusher,
                                producer_id_expiration_ms=logs.producer_id_expiration_ms))  # fmt: skip
            return False
        moved = Log.open(live, log_.config, logs.clock, flusher=logs.flusher,
                         producer_id_expiration_ms=logs.producer_id_expiration_ms)  # fmt: skip
        log_.adopt(moved)
        logs.moved(move.topic, move.partition, source.parent)
        self.lifecycle.remove_in_background([doomed])
        log.info("moved %s-%d from %s to %s", move.topic, move.partition, source.parent,
                 move.target)  # fmt: skip
        return True
