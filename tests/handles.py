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
  A handle that something still holds between two tests of one module is allowed (a module
  fixture may keep a client next to its broker), and so is one that a session- or
  package-scoped fixture's value leads to (a shared cluster's kept admin client).
"""

from __future__ import annotations

import collections
import gc
import sys
import threading
import types
from collections.abc import Generator
from typing import Any

import pytest

from strom.testing.handles import (
    describe_holders,
    drop_exception_locals,
    live_handles,
    release_unreachable_handles,
)

#: What :func:`_reachable_from` does not look into.
_OPAQUE = (types.ModuleType, type, types.FunctionType, types.FrameType)


def _module_ends(item: pytest.Item, nextitem: pytest.Item | None) -> bool:
    """Whether ``item`` is the last test of its module here, so that its teardown finalizes the
    module-scoped fixtures. (A module-scoped fixture of another parameter, such as the broker of
    a ``both_topologies`` module's other topology, is finalized only in the next test's setup:
    the end of a topology is no safe point to look.)"""
    return nextitem is None or getattr(nextitem, "module", None) is not getattr(item, "module", None)


def _reachable_from(roots: list[object], limit: int = 20_000) -> set[int]:
    """The ids of the objects reachable from ``roots`` (breadth first, at most ``limit``
    objects; never through a module or its globals, a class, a function or a frame, which
    reach everything)."""
    barrier = {id(vars(m)) for m in list(sys.modules.values()) if m is not None}
    seen: set[int] = set()
    todo = collections.deque(roots)
    while todo and len(seen) < limit:
        obj = todo.popleft()
        if id(obj) in seen or id(obj) in barrier or isinstance(obj, _OPAQUE):
            continue
        seen.add(id(obj))
        todo.extend(gc.get_referents(obj))
    return seen


def _holders_report(handles: list[object]) -> str:
    """One line per handle: its type and what holds it; and the threads still running
    (a running frame's local variables are not among what the collector can name)."""
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

    def __init__(self) -> None:
        #: the values of the session- and package-scoped fixtures set up and not yet
        #: finalized, by their FixtureDef's id: what they hold outlives a module rightly
        self._wide: dict[int, object] = {}

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(self, fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest
                             ) -> Generator[None, object, object]:  # fmt: skip
        value = yield
        if fixturedef.scope in ("session", "package"):
            self._wide[id(fixturedef)] = value
        return value

    def pytest_fixture_post_finalizer(self, fixturedef: pytest.FixtureDef[Any]) -> None:
        self._wide.pop(id(fixturedef), None)

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
        if left and _module_ends(item, nextitem):  # the count is a hint: look at the objects
            kept = _reachable_from(list(self._wide.values()))
            leaked = [h for h in live_handles() if id(h) not in kept]
            if leaked:
                raise AssertionError(
                    "librdkafka handle(s) still alive after the tests of "
                    f"{item.nodeid.partition('::')[0]} (close consumers, drop producers and "
                    "admin clients before the test ends):\n" + _holders_report(leaked))
        return result
