"""The log cleaner service: compacts ``cleanup.policy=compact`` logs in the background.

Every ``log.cleaner.backoff.ms`` it plans every compacted log (``LogManager.compacted_logs``,
not every log; segment summaries only, on the
event loop), then cleans those that need it, dirtiest first, one at a time: the reading and
rewriting (:func:`strom.storage.cleaner.clean`) runs in a worker thread on duplicated file
descriptors and fsyncs the cleaned segments there, and the swap
(:func:`strom.storage.cleaner.commit`, renames only) runs back on the event loop, so appends,
reads, retention and the swap never race and the loop never waits for an fsync. The
checkpoint is written (fsync, rename) in a worker thread too. ``log.cleaner.enable=false`` turns it
off. The first-dirty offsets live in each log directory's ``cleaner-offset-checkpoint``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import TYPE_CHECKING

from strom.storage import cleaner

if TYPE_CHECKING:
    from strom.clock import Clock
    from strom.config import BrokerConfig
    from strom.periodic import Periodic
    from strom.storage.log_manager import LogManager

log = logging.getLogger(__name__)


class LogCleaner:
    def __init__(self, config: BrokerConfig, logs: LogManager, clock: Clock,
                 periodic: Periodic) -> None:  # fmt: skip
        self.logs = logs
        self.clock = clock
        self.periodic = periodic
        self.enabled = config.get_bool("log.cleaner.enable")
        self.backoff_s = max(config.get_int("log.cleaner.backoff.ms"), 10) / 1000.0
        self._abort = threading.Event()
        self._running = False
        self.checkpoint: dict[tuple[str, int], int] = {}
        #: the partition being cleaned now (a replica move waits for the end of its clean)
        self.cleaning: tuple[str, int] | None = None

    async def start(self) -> None:
        if not self.enabled:
            log.info("log cleaner disabled")
            return
        for parent in self.logs.dirs:  # one checkpoint per log directory, as Kafka's
            self.checkpoint.update(cleaner.read_checkpoint(parent))
        self.periodic.every(self.backoff_s, self.run_once)

    async def stop(self) -> None:
        self._abort.set()
        while self._running:  # let an in-flight clean notice the abort and return
            await asyncio.sleep(0.01)

    async def run_once(self) -> None:
        """One pass over every compacted log (skipped if the previous pass still runs)."""
        if self._running or self._abort.is_set():
            return
        self._running = True
        try:
            await self._pass()
        finally:
            self._running = False

    async def _pass(self) -> None:
        manager = self.logs
        now = self.clock.time_ms()
        # only compacted logs and the checkpoint's entries: never a walk of every partition
        # (10,000 of them cost 3-4 ms of event loop per pass)
        if any(manager.get(*tp) is None for tp in self.checkpoint):  # deleted topics
            self.checkpoint = {tp: o for tp, o in self.checkpoint.items()
                               if manager.get(*tp) is not None}  # fmt: skip
            await self._write_checkpoint()
        plans = []
        for tp, lg in manager.compacted_logs():
            p = cleaner.plan(lg, self.checkpoint.get(tp), now)
            if p is not None and p.should_clean():
                plans.append((tp, p))
        plans.sort(key=lambda item: (not item[1].forced, -item[1].dirty_ratio))
        for tp, p in plans:
            if self._abort.is_set():
                return
            if manager.get(*tp) is not p.log:
                continue
            # re-plan now that earlier cleanings took time
            p2 = cleaner.plan(p.log, self.checkpoint.get(tp), self.clock.time_ms())
            if p2 is None or not p2.should_clean():
                continue
            await self._clean_one(tp, p2)

    async def _write_checkpoint(self) -> None:
        """fsync + rename in a worker thread (passes are serial, so writes never overlap)."""
        split = self.logs.by_dir(self.checkpoint)

        def write() -> None:
            for parent, offsets in split.items():
                if len(split) == 1 or offsets or (parent / cleaner.CHECKPOINT_FILE).exists():
                    cleaner.write_checkpoint(parent, offsets)

        await asyncio.to_thread(write)

    async def _clean_one(self, tp: tuple[str, int], p: cleaner.CleanPlan) -> None:
        cleaner.open_plan(p)
        now = self.clock.time_ms()
        self.cleaning = tp  # a replica move (log_mover) waits for the end of this clean
        try:
            result = await asyncio.to_thread(cleaner.clean, p, now, abort=self._abort)
        except cleaner.CleanAborted:
            return
        except Exception:
            log.exception("cleaning %s-%d failed", *tp)
            return
        finally:
            self.cleaning = None
        if self.logs.get(*tp) is not p.log or not cleaner.commit(p.log, result):
            for group in result.groups:
                if not group.new.closed and group.new.suffix:
                    group.new.delete()
            log.info("log %s-%d changed while it was cleaned; will retry", *tp)
            return
        self.checkpoint[tp] = result.first_uncleanable
        await self._write_checkpoint()
        log.info(
            "cleaned %s-%d up to offset %d: %d of %d records kept, %d -> %d bytes",
            tp[0],
            tp[1],
            result.first_uncleanable,
            result.records_kept,
            result.records_read,
            result.bytes_before,
            result.bytes_after,
        )

