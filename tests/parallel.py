"""Running the suite side by side: pytest-xdist workers (``python -m pytest -n 3``).

Most of the suite waits on broker processes, ZooKeeper sessions and clients (a whole run with
two workers used 35 % of two cores), so three workers share two cores well.
This plugin (registered by ``tests/conftest.py``) is what makes that safe and quick:

- **Ports.** Every process of the run takes ports from ``STROM_TEST_PORTS`` (see
  :func:`strom.testing.process.free_port`; 16000-31999 unless set): each worker an equal
  slice of its own, a run without workers all of it. The range is below the kernel's
  ephemeral range, so no outgoing connection and no other worker can take a port between
  ``free_port`` and the bind.
  Data directories are ``tmp_path`` ones, which pytest-xdist keeps per worker.
- **Units of work.** With ``--dist loadfile`` (pyproject's ``addopts``) this plugin's
  scheduler hands a worker a whole unit at a time: a test module (its module-scoped broker or
  cluster starts once), or one topology of a ``both_topologies`` module (``[single]`` and
  ``[cluster3]`` may run on two workers at once). A worker that runs Spark tests starts its
  own SparkSession (a session-scoped fixture): two cost less than one worker running all of
  ``tests/spark`` while the others idle. The controller knows tests by node id alone, so the
  unit is read off the node id. (pytest-xdist's own ``xdist_group`` marks do not group anything
  under pytest 9.2: pytest-xdist issue 1386.)
- **Order.** Units start longest first (``--no-loadscope-reorder`` keeps this order), from
  the seconds each took in a recorded run (:data:`DURATIONS_FILE`, rewritten by
  ``--store-durations``; a unit it does not know is guessed from its directory), so no long
  module starts last while the other workers idle. A module's ``serial`` tests are a unit of
  their own (``<module>!serial``), and those units go last: the module's other tests run
  beside everything else instead of in the tail, where every worker waits on each serial
  test. The controller learns which tests are serial from a file the workers write as they
  collect (:data:`SERIAL_IDS_FILE`): it knows tests by node id alone.
- **``serial`` tests** (``@pytest.mark.serial``: they measure time, or break the network,
  or kill processes in storms) run while no test runs in any other worker: every test holds
  a shared lock on a file of the run while it runs (setup to teardown), a ``serial`` one an
  exclusive lock, behind a gate so that waiting serial tests are not starved. A run without
  workers takes no lock.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from strom.testing.process import PORT_RANGE_ENV, port_range
from tests.topology import CLUSTER3, SINGLE

try:
    from xdist.scheduler import LoadScopeScheduling
except ImportError:  # pytest-xdist is in the test extra; without it, runs have no workers
    LoadScopeScheduling = None

#: Seconds each unit of work took in a recorded run (``--store-durations``).
DURATIONS_FILE = Path(__file__).parent / "durations.json"
#: Guesses for units the file does not know yet, by their directory (seconds).
GUESS_BY_DIRECTORY = {"cluster": 60.0, "spark": 120.0, "jvm": 120.0, "integration": 15.0,
                      "console": 15.0}
GUESS_OTHERWISE = 1.0
#: Where the ranges of ports are carved from unless STROM_TEST_PORTS names one: below the
#: ephemeral range (Linux's default starts at 32768), above the usual fixed service ports.
DEFAULT_PORTS = (16000, 31999)
#: The test ids of the two runs of a ``both_topologies`` module (tests/conftest.py).
TOPOLOGY_IDS = (SINGLE, CLUSTER3)
LOCK_DIR_KEY = "strom_lock_dir"
#: In the run's lock directory: the node ids of the ``serial`` tests (JSON), written by each
#: worker as it collects, read by the controller (which knows tests by node id alone)
SERIAL_IDS_FILE = "serial-ids.json"
#: What a unit's name ends with when it holds the ``serial`` tests of its module or topology
SERIAL_SUFFIX = "!serial"


def unit_of(nodeid: str, serial: frozenset[str] = frozenset()) -> str:
    """The unit of work of the test ``nodeid``: its module's path, with the topology of a
    ``both_topologies`` module after a colon (one of the ids in its brackets); a ``serial``
    test (its id in ``serial``) in a unit of its module's serial tests alone, so that the
    module's other tests run beside everything else, not in the serial tail of the run."""
    module, _, rest = nodeid.partition("::")
    unit = module
    if rest.endswith("]") and "[" in rest:
        ids = rest[rest.index("[") + 1 : -1].split("-")
        topology = next((t for t in TOPOLOGY_IDS if t in ids), None)
        if topology is not None:
            unit = f"{module}:{topology}"
    return unit + SERIAL_SUFFIX if nodeid in serial else unit


def write_serial_ids(directory: Path, ids: frozenset[str]) -> None:
    """Record the run's serial tests for the controller (atomically: each worker writes the
    same list, and the controller may read it at any time after the collections arrive)."""
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".serial-")
    with os.fdopen(fd, "w") as f:
        json.dump(sorted(ids), f)
    os.replace(tmp, directory / SERIAL_IDS_FILE)


def read_serial_ids(directory: Path) -> frozenset[str]:
    try:
        return frozenset(json.loads((directory / SERIAL_IDS_FILE).read_text()))
    except (OSError, ValueError):
        return frozenset()


def guess_seconds(unit: str) -> float:
    parts = unit.split("/")
    directory = parts[1] if len(parts) > 2 and parts[0] == "tests" else ""
    return GUESS_BY_DIRECTORY.get(directory, GUESS_OTHERWISE)


def worker_ports(worker: int, workers: int) -> tuple[int, int]:
    """Worker ``worker``'s (``gwN``: N) slice of the range, out of ``workers`` equal slices.

    A worker that replaces a crashed one is numbered on (gw2 for two workers): it shares the
    slice of ``worker % workers`` with a live worker, which is safe, as ``free_port`` hands out
    a shared range's ports in turn across processes."""
    lo, hi = port_range() or DEFAULT_PORTS
    size = (hi - lo + 1) // workers
    if size < 100:
        raise pytest.UsageError(f"{PORT_RANGE_ENV}={lo}-{hi}: too few ports for {workers} workers")
    start = lo + size * (worker % workers)
    return start, start + size - 1


def is_controller(config: pytest.Config) -> bool:
    """True in the process that hands tests to pytest-xdist workers (it runs none itself)."""
    return getattr(config, "workerinput", None) is None and bool(getattr(config.option, "tx", None))


class RunLock:
    """The shared/exclusive lock every test of a run with workers takes while it runs."""

    def __init__(self, directory: Path) -> None:
        self.gate = directory / "gate"
        self.running = directory / "running"

    @contextmanager
    def hold(self, exclusive: bool) -> Iterator[None]:
        with open(self.gate, "a") as gate, open(self.running, "a") as running:
            # The gate lets a waiting exclusive holder in before the next shared ones: flock
            # alone would let the other workers' back-to-back tests starve it.
            fcntl.flock(gate, fcntl.LOCK_EX)
            try:
                fcntl.flock(running, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            finally:
                fcntl.flock(gate, fcntl.LOCK_UN)
            try:
                yield
            finally:
                fcntl.flock(running, fcntl.LOCK_UN)


class ParallelRun:
    """The plugin: see the module docstring."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
        self.lock: RunLock | None = None
        self.lock_dir: Path | None = None  # made by the controller, which removes it
        self.durations: dict[str, float] = {}
        self.store = bool(config.getoption("store_durations"))
        self._serial: frozenset[str] | None = None  # the serial tests' ids, once known
        self.run_dir: Path | None = None  # a worker's: the run's lock directory
        if workerinput is not None:  # a pytest-xdist worker
            lo, hi = worker_ports(int(workerinput["workerid"].removeprefix("gw")),
                                  int(workerinput["workercount"]))  # fmt: skip
            os.environ[PORT_RANGE_ENV] = f"{lo}-{hi}"
            if LOCK_DIR_KEY in workerinput:
                self.run_dir = Path(workerinput[LOCK_DIR_KEY])
                self.lock = RunLock(self.run_dir)
        elif is_controller(config):
            self.lock_dir = Path(tempfile.mkdtemp(prefix="strom-tests-lock-"))
        else:  # a run without workers: every port
            lo, hi = port_range() or DEFAULT_PORTS
            os.environ[PORT_RANGE_ENV] = f"{lo}-{hi}"

    # -- the controller --------------------------------------------------------------------

    def serial_ids(self) -> frozenset[str]:
        """The controller's copy of the serial tests' ids, read at its first use: when the
        scheduler splits the collection into units, every worker has written the file (before
        it sent its collection). Read once, so that a test's unit never changes."""
        if self._serial is None:
            self._serial = read_serial_ids(self.lock_dir) if self.lock_dir else frozenset()
        return self._serial

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        if self.lock_dir is not None:
            node.workerinput[LOCK_DIR_KEY] = str(self.lock_dir)

    def pytest_unconfigure(self) -> None:
        if self.lock_dir is not None:
            shutil.rmtree(self.lock_dir, ignore_errors=True)

    # -- collection (every worker: the same order everywhere) ------------------------------

    @pytest.hookimpl(tryfirst=True, optionalhook=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        """Units of work (``unit_of``) in place of ``--dist loadfile``'s modules."""
        if config.getvalue("dist") != "loadfile" or LoadScopeScheduling is None:
            return None
        return UnitScheduling(config, log, self.serial_ids)

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Longest units first, units with a serial test last; each unit's tests stay in the
        order pytest chose (it groups a module's tests by their fixtures' parameters).

        Done here, after every ``pytest_collection_modifyitems`` (pytest's own reordering
        included) and before pytest-xdist's worker sends the collection to the controller
        (whose queue of units keeps the order of their first tests)."""
        if getattr(self.config, "workerinput", None) is None:
            return  # a run without workers keeps pytest's order
        recorded = load_durations()
        serial = frozenset(i.nodeid for i in session.items if i.get_closest_marker("serial"))
        if self.run_dir is not None:  # for the controller's scheduler (it sees node ids alone)
            write_serial_ids(self.run_dir, serial)
        first_seen: dict[str, int] = {}
        for index, item in enumerate(session.items):
            first_seen.setdefault(unit_of(item.nodeid, serial), index)

        def rank(item: pytest.Item) -> tuple[bool, float, int]:
            unit = unit_of(item.nodeid, serial)
            seconds = recorded.get(unit, recorded.get(unit.removesuffix(SERIAL_SUFFIX),
                                                      guess_seconds(unit)))  # fmt: skip
            return unit.endswith(SERIAL_SUFFIX), -seconds, first_seen[unit]

        session.items.sort(key=rank)

    # -- running ---------------------------------------------------------------------------

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, object, object]:
        if self.lock is None:
            return (yield)
        with self.lock.hold(exclusive=item.get_closest_marker("serial") is not None):
            return (yield)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.store:
            unit = unit_of(report.nodeid, self.serial_ids())
            self.durations[unit] = self.durations.get(unit, 0.0) + report.duration

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.store and getattr(self.config, "workerinput", None) is None and self.durations:
            merged = {**load_durations(), **{k: round(v, 1) for k, v in self.durations.items()}}
            DURATIONS_FILE.write_text(json.dumps(dict(sorted(merged.items())), indent=1) + "\n")


def load_durations() -> dict[str, float]:
    try:
        data = json.loads(DURATIONS_FILE.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.items()} if isinstance(data, dict) else {}


def add_options(parser: pytest.Parser) -> None:
    """The plugin's options (called from ``tests/conftest.py``'s ``pytest_addoption``)."""
    parser.addoption(
        "--store-durations",
        action="store_true",
        default=False,
        help=f"record the seconds each unit of work took in {DURATIONS_FILE.name} "
        "(used to start the longest units first when running with -n)",
    )


if LoadScopeScheduling is not None:

    class UnitScheduling(LoadScopeScheduling):  # type: ignore[misc,valid-type]
        """pytest-xdist's scope scheduling (a worker gets a whole scope, scopes in the order
        of the collection) with :func:`unit_of` as the scope (the serial tests apart)."""

        def __init__(self, config: pytest.Config, log: Any,
                     serial_ids: Callable[[], frozenset[str]]) -> None:  # fmt: skip
            super().__init__(config, log)
            self.serial_ids = serial_ids

        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid, self.serial_ids())

        def _assign_work_unit(self, node: Any) -> None:
            """Units with no test left to run are dropped, not handed out.

            When a worker crashes, pytest-xdist (3.8) puts every unit it was ever given back
            in the queue, finished ones too. A worker handed a finished unit is sent no test,
            so it reports none and is never given more work nor told to stop: the run hung
            (seen after a worker crashed)."""
            for scope in [s for s, tests in self.workqueue.items() if all(tests.values())]:
                del self.workqueue[scope]
            if self.workqueue:
                super()._assign_work_unit(node)
            else:
                node.shutdown()
