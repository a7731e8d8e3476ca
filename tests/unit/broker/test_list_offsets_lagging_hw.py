"""ListOffsets answers only offsets a client can fetch, and OFFSET_NOT_AVAILABLE from a new
leader whose high watermark still lags the start of its epoch (Kafka's
``Partition.fetchOffsetForTimestamp``). Found by Java's admin client on the 3-broker cluster:
right after a preferred-leader election, ``listOffsets(latest)`` was told 0 for a partition
holding 5 records (tests/jvm)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from strom.broker.handlers import list_offsets
from strom.protocol.errors import ErrorCode, KafkaError

LATEST, EARLIEST, MAX_TS = list_offsets.LATEST, list_offsets.EARLIEST, list_offsets.MAX_TIMESTAMP


def _ctx(hw: int, epoch_start: int, lso: int | None = None) -> Any:
    """A leader of t-0 holding offsets 0..9 (timestamp 1000 * offset), HW ``hw``."""
    log = SimpleNamespace(
        high_watermark=hw, last_stable_offset=hw if lso is None else lso, log_start_offset=0,
        offset_for_timestamp=lambda ts: next(((o, o * 1000) for o in range(10) if o * 1000 >= ts),
                                             None),
        max_timestamp_offset=lambda: (9, 9000),
        leader_epochs=SimpleNamespace(epoch_for_offset=lambda offset: 3),
    )  # fmt: skip
    part = SimpleNamespace(log=log, leader_epoch=4, leader_epoch_start=epoch_start)
    return SimpleNamespace(replicas=SimpleNamespace(leader_partition=lambda t, p, e: part))


def lookup(ctx: Any, ts: int, *, client: bool = True, read_committed: bool = False) -> Any:
    return list_offsets._lookup(ctx, "t", 0, ts, -1, read_committed, client)


def test_a_leader_with_a_lagging_hw_answers_offset_not_available() -> None:
    ctx = _ctx(hw=0, epoch_start=10)  # elected at LEO 10, still knows HW 0
    for ts in (LATEST, MAX_TS, 5000):
        with pytest.raises(KafkaError) as refused:
            lookup(ctx, ts)
        assert refused.value.error_code == ErrorCode.offset_not_available
    assert lookup(ctx, EARLIEST) == (-1, 0, 3)  # the start is always known
    # a broker asking (replica id >= 0) gets the log as it is
    assert lookup(ctx, LATEST, client=False) == (-1, 0, 4)


def test_once_the_hw_reached_the_epoch_start_offsets_are_answered() -> None:
    ctx = _ctx(hw=10, epoch_start=10)
    assert lookup(ctx, LATEST) == (-1, 10, 4)
    assert lookup(ctx, 5000) == (5000, 5, 3)
    assert lookup(ctx, MAX_TS) == (9000, 9, 3)


def test_only_fetchable_offsets_are_answered() -> None:
    # HW 6 (not lagging: the epoch started at 4): records 6..9 are not committed yet
    ctx = _ctx(hw=6, epoch_start=4)
    assert lookup(ctx, 5000) == (5000, 5, 3)
    assert lookup(ctx, 7000) == (-1, -1, -1)
    assert lookup(ctx, MAX_TS) == (-1, -1, -1)
    # under read_committed the LSO bounds them (an open transaction from offset 3 on)
    committed = _ctx(hw=10, epoch_start=0, lso=3)
    assert lookup(committed, 2000, read_committed=True) == (2000, 2, 3)
    assert lookup(committed, 5000, read_committed=True) == (-1, -1, -1)
    assert lookup(committed, LATEST, read_committed=True) == (-1, 3, 4)
