"""Shared fixtures: a real strom broker process per test module (or an external one).

Topologies. The module-scoped ``broker`` fixture (and any module fixture built with
:func:`module_broker`) is a single broker process, or a local cluster (``strom.testing.cluster``:
a ZooKeeper and three brokers on 127.0.0.2..4, ``default.replication.factor=3``,
``num.partitions=4``, as issue 9 asks):

- ``STROM_TEST_CLUSTER=3`` runs every module against the cluster (by hand: the whole suite);
- a module marked ``pytestmark = pytest.mark.both_topologies`` runs twice in any plain
  ``pytest`` run, test ids ``[single]`` and ``[cluster3]`` (what CI runs in both topologies);
- ``STROM_TEST_BOOTSTRAP=host:port`` runs them against a broker that is already running
  (handy for comparing strom with another Kafka-compatible broker).

Tests about one broker process (kill/restart it, its data dir, its config) start their own
``BrokerProcess`` (``fresh_broker`` or a fixture of their module) and stay single-node.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.testing import BrokerProcess
from tests.handles import HandleGuard
from tests.parallel import ParallelRun, add_options, is_controller
from tests.topology import CLUSTER3, SINGLE, default_topology, module_broker

#: First on the PYTHONPATH of every process the tests start: see its ``hypothesis`` package.
CHILD_SITE = Path(__file__).parent / "child_site"


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    """Ports, units of work, order and the ``serial`` lock of a run (``tests/parallel.py``);
    no librdkafka handle outlives its test (``tests/handles.py``); the processes the tests
    start import no hypothesis (``tests/child_site``)."""
    config.pluginmanager.register(ParallelRun(config), "strom-parallel-run")
    config.pluginmanager.register(HandleGuard(), "strom-handle-guard")
    if not is_controller(config):  # its environment is the workers', who need hypothesis
        inherited = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(CHILD_SITE), inherited]))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Modules marked ``both_topologies`` get ``topology`` (and so their broker) twice."""
    if "topology" not in metafunc.fixturenames:
        return
    if metafunc.definition.get_closest_marker("both_topologies") is None:
        return
    if os.environ.get("STROM_TEST_BOOTSTRAP") or os.environ.get("STROM_TEST_CLUSTER"):
        return  # one topology chosen by hand for the whole run
    metafunc.parametrize("topology", [SINGLE, CLUSTER3], indirect=True, scope="module")


@pytest.fixture(scope="module")
def topology(request: pytest.FixtureRequest) -> str:
    """"single" or "cluster3": this module's run (parametrized by ``both_topologies``)."""
    return str(getattr(request, "param", None) or default_topology())


@pytest.fixture(scope="module")
def broker(topology: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A broker (or cluster) shared by the tests of one module; each test uses its own topics."""
    with module_broker(topology, tmp_path_factory.mktemp("broker")) as b:
        yield b


@pytest.fixture
def fresh_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A broker of this test's own, for tests that kill, restart or reconfigure it."""
    proc = BrokerProcess(tmp_path / "data")
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    """A topic name unique to this test."""
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:60]
    return f"{base}-{uuid.uuid4().hex[:8]}"
