"""Time sources.

Everything that depends on wall-clock or monotonic time (segment rolling, retention, session
timeouts, long polls) takes a :class:`Clock` so tests can inject :class:`FakeClock` and step time
deterministically instead of sleeping.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """A source of wall-clock milliseconds (record timestamps) and monotonic seconds."""

    def time_ms(self) -> int:
        """Milliseconds since the Unix epoch."""
        ...

    def monotonic(self) -> float:
        """Seconds from an arbitrary, never-decreasing origin."""
        ...


class SystemClock:
    """The real clock."""

    def time_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        return time.monotonic()


class FakeClock:
    """A clock that only moves when told to; both readings advance together, unless the wall
    clock is stepped on its own (:meth:`step_wall`)."""

    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self._now_ms = now_ms
        self._mono = 0.0

    def time_ms(self) -> int:
        return self._now_ms

    def monotonic(self) -> float:
        return self._mono

    def advance(self, ms: int) -> None:
        if ms < 0:
            raise ValueError("a clock never goes back")
        self._now_ms += ms
        self._mono += ms / 1000.0

    def step_wall(self, ms: int) -> None:
        """Step the wall clock alone by ``ms`` (negative: back), as NTP or an operator does;
        monotonic time does not move."""
        self._now_ms += ms
