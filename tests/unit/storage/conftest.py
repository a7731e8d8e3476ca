"""Helpers for storage tests: a FakeClock and a log factory."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from strom.clock import FakeClock
from strom.protocol.record_batch import build_batch, decode_records, iter_batches
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
