"""No librdkafka handle outlives its test (registered by ``tests/conftest.py``).

A confluent-kafka client that outlives the broker of its test keeps reconnecting to it and
floods the run's output with ``Connect to ... failed: Connection refused`` lines (hiding real
failures), costs CPU, and can connect to a later test's broker that reuses the port (see
:mod:`strom.testing.handles`). This plugin, after every test's teardown:

- frees the handles only a reference cycle still holds (``gc.collect()``, only when the
  process has a handle at all), and drops the locals of a failed test's frames, which pytest
  keeps in ``sys.last_value`` for post-mortem debugging;
- when the tests of a module are over, and with them every fixture that might rightly hold a
  client, fails that last teardown if any handle is still alive, naming what holds each one
  (a module's global, a thread's frame).
  A handle that something still holds between two tests of one module is allowed: a module
  fixture may keep a client next to its broker.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Generator

import pytest

from strom.testing.handles import (
    describe_holders,
    drop_exception_locals,
    live_handles,
    release_unreachable_handles,
)


def _module_ends(item: pytest.Item, nextitem: pytest.Item | None) -> bool:
    """Whether ``item`` is the last test of its module here, so that its teardown finalizes the
    module-scoped fixtures. (A module-scoped fixture of another parameter, such as the broker of
    a ``both_topologies`` module's other topology, is finalized only in the next test's setup:
    the end of a topology is no safe point to look.)"""
    return nextitem is None or getattr(nextitem, "module", None) is not getattr(item, "module", None)


def _holders_report() -> str:
    """One line per live handle: its type and what holds it; and the threads still running
    (a running frame's local variables are not among what the collector can name)."""
    handles = live_handles()
    lines = []
    for handle in handles:
        holders = "; ".join(describe_holders(handle, ignore=[handles])) or "?"
        lines.append(f"  {type(handle).__name__} held by: {holders}")
    others = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    if others:
        lines.append(f"  threads still running: {', '.join(others)}")
    return "\n".join(lines)


class HandleGuard:
    """The pytest plugin: see the module's docstring."""

    # trylast: inside the capture plugin's wrapper, so that what librdkafka logs while the
    # collector destroys a handle is the teardown's captured output, as any test output is
    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtest_teardown(self, item: pytest.Item, nextitem: pytest.Item | None
                                ) -> Generator[None, None, None]:  # fmt: skip
        result = yield
        left = release_unreachable_handles()
        if left and getattr(sys, "last_value", None) is not None:
            drop_exception_locals(sys.last_value)
            left = release_unreachable_handles()
        if left and _module_ends(item, nextitem) and live_handles():  # the count is a hint
            raise AssertionError(
                "librdkafka handle(s) still alive after the tests of "
                f"{item.nodeid.partition('::')[0]} (close consumers, drop producers and admin "
                "clients before the test ends):\n" + _holders_report())
        return result
