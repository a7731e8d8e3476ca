"""tests/handles.py, the suite's guard, in a pytest run of its own (a subprocess): it frees the
clients a cycle holds after each test, and fails a module that leaves one reachable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from strom.testing import free_port

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="counts librdkafka's threads in /proc")

CONFTEST = """
import pytest
from confluent_kafka import Producer
from tests.handles import HandleGuard

def pytest_configure(config):
    config.pluginmanager.register(HandleGuard(), "strom-handle-guard")

class Shared:
    def __init__(self):
        self.clients = {{"producer": Producer({{"bootstrap.servers": "{nowhere}"}})}}

@pytest.fixture(scope="session")
def shared():
    yield Shared()  # a session's client: it outlives every module rightly
"""

SHARED = """
def test_uses_the_session_client(shared):
    assert shared.clients["producer"] is not None
"""

CYCLIC = """
import gc
from confluent_kafka import Producer
from strom.testing.handles import live_handles

gc.disable()  # only the guard collects in this run

def test_leaves_a_cycle():
    box = {{"producer": Producer({{"bootstrap.servers": "{nowhere}"}})}}
    box["self"] = box

def test_starts_without_it():
    assert len(live_handles()) == 1  # the session fixture's, not the cycle's
"""

LEAKY = """
from confluent_kafka import Producer

KEPT = None

def test_keeps_one():
    global KEPT
    KEPT = Producer({{"bootstrap.servers": "{nowhere}"}})

def test_then_another():
    pass
"""

FAILING = """
from confluent_kafka import Producer

def test_fails_holding_one():
    producer = Producer({{"bootstrap.servers": "{nowhere}"}})
    assert producer is None  # fails: pytest keeps this frame in sys.last_value
"""


def run_pytest(directory: Path, *modules: str) -> subprocess.CompletedProcess[str]:
    """A pytest run in ``directory`` with only the guard registered (its conftest)."""
    (directory / "conftest.py").write_text(CONFTEST.format(nowhere=f"127.0.0.1:{free_port()}"))
    root = Path(__file__).resolve().parents[3]  # where ``tests`` is a package
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
         *modules], cwd=directory, env=env, capture_output=True, text=True, timeout=120)


def test_the_guard_frees_cycles_and_names_what_holds_the_rest(tmp_path: Path) -> None:
    nowhere = f"127.0.0.1:{free_port()}"
    (tmp_path / "test_cyclic.py").write_text(CYCLIC.format(nowhere=nowhere))
    (tmp_path / "test_leaky.py").write_text(LEAKY.format(nowhere=nowhere))
    (tmp_path / "test_shared.py").write_text(SHARED)
    run = run_pytest(tmp_path, "test_shared.py", "test_cyclic.py", "test_leaky.py")
    out = run.stdout
    assert run.returncode == 1, out
    assert out.startswith(".....E"), out  # five tests passed: the cycle was freed in between
    assert "FAILED" not in out, out
    assert out.count("ERROR at teardown") == 1, out  # only after the module that leaks
    assert "ERROR at teardown of test_then_another" in out, out
    assert "librdkafka handle(s) still alive after the tests of test_leaky.py" in out, out
    assert "Producer held by: KEPT of module test_leaky" in out, out


def test_a_failed_test_is_not_also_a_leak(tmp_path: Path) -> None:
    """pytest keeps a failed test's exception, and with it the frame that holds the client:
    the guard clears that frame's locals instead of reporting a leak on top of the failure."""
    (tmp_path / "test_failing.py").write_text(FAILING.format(nowhere=f"127.0.0.1:{free_port()}"))
    out = run_pytest(tmp_path, "test_failing.py").stdout
    assert out.startswith("F"), out
    assert "assert producer is None" in out, out  # the failure itself is reported in full
    assert "ERROR" not in out and "still alive" not in out, out
