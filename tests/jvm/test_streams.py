"""Kafka Streams with ``processing.guarantee=exactly_once_v2`` on strom, unchanged.

``jvm/src/main/java/io/strom/jvm/OrdersApp.java`` is a plain Streams app (a changelog-backed
aggregation behind a repartition topic, a windowed count, a stream-table join); each test runs
it as its own JVM process(es) against strom, feeds it orders with confluent-kafka, and checks
the committed output against the known answer (:mod:`tests.jvm.streams_check`):

* a Streams instance killed with kill -9 in the middle of the input, then started again;
* a rebalance: a second instance joins mid-run, then the first leaves, its tasks (and their
  state, restored from the changelogs) moving to the second;
* on the 3-broker cluster, a broker killed with kill -9 mid-run and started again.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.testing.cluster import wait_until
from tests.jvm.jvm import JavaProcess
from tests.jvm.streams_check import OUTPUTS, OrdersInput, read_committed
from tests.topology import module_broker

pytestmark = [pytest.mark.jvm, pytest.mark.slow, pytest.mark.timeout(300)]
APP = "io.strom.jvm.OrdersApp"


class StreamsInstance(JavaProcess):
    """One OrdersApp JVM; :meth:`wait_running` waits for its RUNNING state with tasks."""

    def __init__(self, bootstrap: str, app_id: str, prefix: str, work: Path, name: str) -> None:
        state = work / f"state-{name}"
        state.mkdir(parents=True, exist_ok=True)
        super().__init__(APP, [bootstrap, app_id, str(state), prefix], work / f"{name}.log")
        self.name = name

    def states(self) -> list[str]:
        try:
            lines = self.log_file.read_text(errors="replace").splitlines()
        except OSError:
            return []
        return [line for line in lines if line.startswith("STATE ")]

    def wait_running(self, timeout: float = 90.0, *, since: int = 0) -> int:
        """Until a ``STATE RUNNING tasks=N`` line after the first ``since`` state lines with
        N > 0; that N."""

        def tasks() -> int | None:
            assert self.running(), f"{self.name} exited:\n{self.log_tail()}"
            for line in self.states()[since:]:
                if line.startswith("STATE RUNNING tasks=") and int(line.rsplit("=", 1)[1]) > 0:
                    return int(line.rsplit("=", 1)[1])
            return None

        return wait_until(tasks, timeout, f"{self.name} RUNNING with tasks")

    def uncaught(self) -> list[str]:
        text = self.log_file.read_text(errors="replace") if self.log_file.exists() else ""
        return [line for line in text.splitlines() if line.startswith("UNCAUGHT")]


def wait_for_output(bootstrap: str, data: OrdersInput, timeout: float,
                    at_least: int | None = None) -> dict[str, list[tuple[str, str]]]:  # fmt: skip
    """Read the committed outputs until each holds ``at_least`` records (default: all the
    known answer's); the last read."""
    wanted = data.expected_counts()
    target = {k: at_least if at_least is not None else n for k, n in wanted.items()}
    names = [data.prefix + o for o in OUTPUTS]
    last: dict[str, list[tuple[str, str]]] = {}

    def enough() -> bool:
        nonlocal last
        read = read_committed(bootstrap, names, data.partitions)
        last = {o: read[data.prefix + o] for o in OUTPUTS}
        return all(len(last[o]) >= target[o] for o in OUTPUTS)

    try:
        wait_until(enough, timeout, "Streams output", interval=1.0)
    except AssertionError as exc:
        counts = {o: len(v) for o, v in last.items()}
        raise AssertionError(f"{exc}; committed so far {counts}, wanted {target}") from None
    return last


def settle_and_check(bootstrap: str, data: OrdersInput, timeout: float = 120.0) -> None:
    """Wait for the whole answer, give a duplicate the time to show up, then compare."""
    wait_for_output(bootstrap, data, timeout)
    time.sleep(2.0)
    names = [data.prefix + o for o in OUTPUTS]
    read = read_committed(bootstrap, names, data.partitions)
    data.check({o: read[data.prefix + o] for o in OUTPUTS})


def _setup(bootstrap: str, replication: int) -> tuple[OrdersInput, str]:
    tag = uuid.uuid4().hex[:8]
    data = OrdersInput(prefix=f"s{tag}-")
    data.create_topics(bootstrap, replication)
    data.produce_customers(bootstrap)
    return data, f"orders-app-{tag}"


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    # short transaction timeouts are the app's; the broker keeps Kafka's defaults
    with module_broker("single", tmp_path_factory.mktemp("broker")) as b:
        yield b


def test_instance_killed_mid_run_then_restarted(single: Any, tmp_path: Path) -> None:
    data, app_id = _setup(single.bootstrap, 1)
    with StreamsInstance(single.bootstrap, app_id, data.prefix, tmp_path, "a") as a:
        a.wait_running()
        # orders keep coming (20 every 0.1 s) while the instance is killed: it dies in the
        # middle of a transaction, not idle
        feeder = threading.Thread(target=lambda: [
            (data.produce_orders(single.bootstrap, 20), time.sleep(0.1)) for _ in range(15)])
        feeder.start()
        try:
            wait_for_output(single.bootstrap, data, 90, at_least=50)  # mid-run: some committed
            a.kill()  # kill -9: its open transaction is left behind
        finally:
            feeder.join(120)
    data.produce_orders(single.bootstrap, 300)
    # the same instance again (same state directory, so the same transactional ids: its
    # producers fence the dead one's and abort what it had not committed)
    with StreamsInstance(single.bootstrap, app_id, data.prefix, tmp_path, "a") as again:
        again.wait_running(since=len(again.states()))
        settle_and_check(single.bootstrap, data)
        assert not again.uncaught(), again.uncaught()


def test_rebalance_to_a_second_instance(single: Any, tmp_path: Path) -> None:
    data, app_id = _setup(single.bootstrap, 1)
    a = StreamsInstance(single.bootstrap, app_id, data.prefix, tmp_path, "a")
    b = StreamsInstance(single.bootstrap, app_id, data.prefix, tmp_path, "b")
    try:
        a.start()
        all_tasks = a.wait_running()  # 4 partitions x 4 sub-topologies, all on a
        data.produce_orders(single.bootstrap, 200)
        wait_for_output(single.bootstrap, data, 90, at_least=100)
        b.start()
        b.wait_running()  # the group rebalanced: b took some of a's tasks
        data.produce_orders(single.bootstrap, 200)
        wait_for_output(single.bootstrap, data, 90, at_least=300)
        a.stop()  # SIGTERM: its shutdown hook closes it cleanly, its tasks move to b
        assert a.states()[-2:] == ["STATE PENDING_SHUTDOWN", "STATE NOT_RUNNING"], a.log_tail()
        data.produce_orders(single.bootstrap, 200)
        settle_and_check(single.bootstrap, data)
        owned = [int(s.rsplit("=", 1)[1]) for s in b.states() if "tasks=" in s]
        assert owned[0] < all_tasks and owned[-1] == all_tasks, f"b's tasks: {b.states()}"
        assert not a.uncaught() and not b.uncaught(), a.uncaught() + b.uncaught()
    finally:
        a.kill()
        b.kill()


def test_broker_killed_mid_run_on_a_cluster(jvm_cluster: Any, tmp_path: Path) -> None:
    cluster = jvm_cluster
    data, app_id = _setup(cluster.bootstrap, 3)
    victim = None
    try:
        with StreamsInstance(cluster.bootstrap, app_id, data.prefix, tmp_path, "a") as a:
            a.wait_running()
            data.produce_orders(cluster.bootstrap, 150)
            wait_for_output(cluster.bootstrap, data, 90, at_least=50)
            # kill -9 the leader of the orders' first partition (and, with it, the leaders
            # of whatever else it leads: the repartition topics, the transaction state log)
            victim = cluster.leader_of(data.prefix + "orders", 0)
            cluster.kill(victim)
            data.produce_orders(cluster.bootstrap, 150)
            wait_for_output(cluster.bootstrap, data, 120, at_least=300)
            cluster.start_broker(victim)
            data.produce_orders(cluster.bootstrap, 150)
            settle_and_check(cluster.bootstrap, data, timeout=180)
    finally:
        if victim is not None and victim not in cluster.running_ids():
            cluster.start_broker(victim)
