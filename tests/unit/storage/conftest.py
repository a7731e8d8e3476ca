"""Helpers for storage tests: a FakeClock and a log factory."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from strom.clock import FakeClock
from strom.protocol.control import build_marker
from strom.protocol.record_batch import build_batch, decode_records, iter_batches, parse_header
from strom.storage.batch_validation import AppendOrigin
from strom.storage.log import Log
from strom.storage.log_config import LogConfig


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_700_000_000_000)


@pytest.fixture
def open_log(tmp_path: Path, clock: FakeClock) -> Callable[..., Log]:
    def factory(**cfg: object) -> Log:
        return Log.open(tmp_path / "topic.a-b-0", LogConfig(**cfg), clock)  # type: ignore[arg-type]

    return factory


def batch(clock: FakeClock, *values: bytes, **kw: object) -> bytes:
    return build_batch([(b"k", v, [], clock.time_ms()) for v in values], **kw)  # type: ignore[arg-type]


def values(data: bytes) -> list[tuple[int, bytes | None]]:
    return [(r.offset, r.value) for _h, b in iter_batches(data) for r in decode_records(b)]


def leader_log_and_batches(path: Path, cfg: LogConfig, clock: FakeClock) -> tuple[Log, list[bytes]]:
    """A leader's log of 30 batches over three leader epochs, every seventh transactional
    and followed by its marker (commit or abort), opened at ``path``; and its batches as a
    follower fetches them, in order (the follower-copy tests compare the files)."""
    leader = Log.open(path, cfg, clock)
    seq = 0
    for i in range(30):
        txn = i % 7 == 3
        leader.append(batch(clock, b"v%d" % i, b"w" * i, producer_id=9 if txn else -1,
                            producer_epoch=0 if txn else -1, base_sequence=seq if txn else -1,
                            is_transactional=txn), leader_epoch=1 + i // 10)  # fmt: skip
        if txn:
            seq += 2
            leader.append(build_marker(9, 0, commit=i % 2 == 0, coordinator_epoch=4,
                                       timestamp_ms=clock.time_ms()),
                          origin=AppendOrigin.COORDINATOR, leader_epoch=1 + i // 10)  # fmt: skip
        clock.advance(3)
    chunks: list[bytes] = []
    while (offset := len(chunks) and parse_header(chunks[-1]).next_offset) < leader.log_end_offset:
        chunks += [bytes(b) for _h, b in iter_batches(leader.read(offset, 1 << 20).records)]
    return leader, chunks
