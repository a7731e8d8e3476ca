"""A broker whose wall clock a test steps back and forth (an NTP step), its monotonic clock
untouched: for tests of what follows the wall clock and what must not.

Everything in strom that reads the wall clock does it through :class:`strom.clock.Clock`
(record timestamps, LogAppendTime, retention, segment rolls, transaction and producer-id
timeouts); monotonic time (session timeouts, delays, long polls) comes from the event loop
and ``Clock.monotonic``. A broker started with :meth:`ClockJump.environment` runs
:func:`install` at start-up (:mod:`strom.testing.site_hooks`), which adds an offset, read from
the test's control directory, to :meth:`strom.clock.SystemClock.time_ms`::

    jump = ClockJump(tmp_path / "clock")
    with BrokerProcess(tmp_path / "data", env=jump.environment()) as broker:
        jump.step(-86_400_000)      # the broker's wall clock goes back one day, now

(libfaketime was tried first: with its monotonic clock left real it breaks Python's
``time.sleep``, EINVAL from ``clock_nanosleep``.)

Control files: ``offset`` (milliseconds, written by the test), ``applied-<pid>`` (the offset
the broker uses, written by it within 10 ms).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path

from strom import clock
from strom.testing import site_hooks


class ClockJump:
    """The test's side: the offset of the brokers started with :meth:`environment`."""

    def __init__(self, control_dir: Path) -> None:
        self.dir = Path(control_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.offset_ms = 0
        self._write()

    def environment(self) -> dict[str, str]:
        return site_hooks.environment(self.dir, site_hooks.CLOCK_ENV, self.dir)

    def step(self, ms: int, *, wait: float = 10.0) -> int:
        """Move the brokers' wall clock by ``ms`` (negative: back) now; the total offset.
        Returns once every live broker applied it."""
        self.offset_ms += ms
        self._write()
        self.wait_applied(wait)
        return self.offset_ms

    def wait_applied(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            seen = []
            for path in self.dir.glob("applied-*"):
                if path.suffix == ".tmp":  # a child writing its next answer (then renamed)
                    continue
                pid = int(path.name.partition("-")[2])
                with contextlib.suppress(OSError, ValueError):
                    os.kill(pid, 0)
                    seen.append(int(path.read_text()))
            if seen and all(s == self.offset_ms for s in seen):
                return
            time.sleep(0.01)
        raise TimeoutError(f"no broker applied the clock offset {self.offset_ms} ms")

    def _write(self) -> None:
        tmp = self.dir / "offset.tmp"
        tmp.write_text(str(self.offset_ms))
        os.replace(tmp, self.dir / "offset")


def install(control_dir: str | Path) -> None:
    """Add the control directory's offset to :meth:`strom.clock.SystemClock.time_ms` in this
    process (re-read every 10 ms by a thread)."""
    folder = Path(control_dir)
    state = {"offset": 0}
    real = clock.SystemClock.time_ms

    def time_ms(self: clock.SystemClock) -> int:
        return real(self) + state["offset"]

    def watch() -> None:
        applied = None
        while True:
            with contextlib.suppress(OSError, ValueError):
                state["offset"] = int((folder / "offset").read_text())
            if state["offset"] != applied:
                applied = state["offset"]
                tmp = folder / f"applied-{os.getpid()}.tmp"
                tmp.write_text(str(applied))
                os.replace(tmp, folder / f"applied-{os.getpid()}")
            time.sleep(0.01)

    with contextlib.suppress(OSError, ValueError):
        state["offset"] = int((folder / "offset").read_text())
    clock.SystemClock.time_ms = time_ms  # type: ignore[method-assign]
    threading.Thread(target=watch, name="strom-clockjump", daemon=True).start()
