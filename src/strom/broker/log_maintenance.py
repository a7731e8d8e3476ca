"""The log manager's periodic work on the event loop: retention, rolls, flushes, and Kafka's
recovery-point checkpoint.

:func:`tick` runs every ``min(log.retention.check.interval.ms, log.flush.scheduler.interval.ms)``
(:func:`interval_s`); :func:`checkpoint_recovery_points` every
``log.flush.offset.checkpoint.interval.ms``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from strom.config import BrokerConfig
    from strom.storage.log_manager import LogManager

#: Logs visited by periodic maintenance between two yields to the event loop (a visit costs
#: about 4-10 us: a slice stays near a millisecond whatever the partition count)
MAINTENANCE_SLICE = 200

log = logging.getLogger(__name__)


def interval_s(config: BrokerConfig) -> float:
    ms = min(
        config.get_int("log.retention.check.interval.ms"),
        config.get_int("log.flush.scheduler.interval.ms"),
    )
    return max(ms, 10) / 1000.0


async def tick(logs: LogManager) -> None:
    """Log maintenance in slices of :data:`MAINTENANCE_SLICE` logs, yielding to the loop
    between them: a tick with thousands of logs due (the first batch to every partition
    of a new topic touches each) must not hold every connection for all of them."""
    # bounded: each log needs at most one visit and one producer-expiry check per tick;
    # what appends touch meanwhile waits for the next tick, as before
    slices = 2 * (logs.count() // MAINTENANCE_SLICE) + 2
    logs.maintenance(MAINTENANCE_SLICE)
    while logs.maintenance_backlog() and slices > 0:
        slices -= 1
        await asyncio.sleep(0)
        logs.maintenance(MAINTENANCE_SLICE)


async def checkpoint_recovery_points(logs: LogManager) -> None:
    """Kafka's recovery-point checkpoint of the data directory, written by the flusher
    thread (after the fsyncs queued before it; never concurrently with shutdown's)."""
    try:
        await asyncio.wrap_future(logs.checkpoint_recovery_points_async())
    except OSError as exc:  # a full or failing disk, reported already: the next one retries
        log.warning("recovery-point checkpoint not written: %s", exc)
