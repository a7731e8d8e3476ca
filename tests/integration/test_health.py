"""/health/live and /health/ready: they flip as the broker starts and stops; readiness names its
failing checks; the cluster work's checks plug in."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from strom.broker.assembly import Broker
from strom.broker.group.service import GroupService
from strom.broker.observability import cluster_state
from strom.config import BrokerConfig
from strom.replication.metadata_cache import PartitionInfo
from strom.testing import BrokerProcess, free_port
from tests.integration.admin_http import get_json
from tests.integration.clients import consume_all, create_topic, produce

CHECKS = {"started", "logs_loaded", "listener", "coordinators_loaded", "controller_known",
          "no_offline_partitions"}  # fmt: skip


def _probe(url: str) -> tuple[int | None, Any]:
    """(status, JSON body); (None, None) when nothing answers."""
    try:
        return get_json(url, timeout=5)
    except OSError:
        return None, None


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


class _Poller(threading.Thread):
    """Polls /health/ready until told to stop; on each 200, also checks the Kafka port."""

    def __init__(self, url: str, kafka_port: int) -> None:
        super().__init__(daemon=True)
        self.url, self.kafka_port = url, kafka_port
        self.seen: list[tuple[int | None, Any, bool | None]] = []
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            status, body = _probe(self.url)
            kafka_up = _accepts(self.kafka_port) if status == 200 else None
            self.seen.append((status, body, kafka_up))
            time.sleep(0.02)

    def first_ready(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for i, (status, _body, _up) in enumerate(list(self.seen)):
                if status == 200:
                    return i
            time.sleep(0.05)
        raise AssertionError(f"never ready: {self.seen[-3:]}")


def test_ready_flips_as_the_broker_starts_and_stops(tmp_path: Path, topic_name: str) -> None:
    proc = BrokerProcess(tmp_path / "data", admin=True)
    ready = f"{proc.admin_url}/health/ready"
    poller = _Poller(ready, proc.port)
    poller.start()
    try:
        proc.start()
        first = poller.first_ready(30)
        status, body, kafka_up = poller.seen[first]
        assert kafka_up, "ready before the Kafka listener accepted connections"
        assert body == {"status": "ready", "failing": [], "checks": dict.fromkeys(CHECKS, True)}
        for status, body, _ in poller.seen[:first]:  # before: nothing listening, or 503
            assert status in (None, 503)
            if status == 503:
                assert body["status"] == "not ready" and body["failing"]
                assert set(body["failing"]) <= CHECKS and "started" in body["failing"]
        assert get_json(f"{proc.admin_url}/health/live") == (200, {"status": "live"})
        create_topic(proc.bootstrap, topic_name)
        produce(proc.bootstrap, topic_name, [{"value": b"ready", "partition": 0}])
        assert [m.value() for m in consume_all(proc.bootstrap, topic_name, [0], 1)] == [b"ready"]
        mark = len(poller.seen)
        assert proc.stop() == 0
        time.sleep(0.1)  # one more probe after the exit
    finally:
        poller.halt.set()
        poller.join(10)
        proc.stop()
    after = [status for status, _b, _u in poller.seen[mark:]]
    assert after and after[-1] is None  # nothing answers once the process is gone
    # 200 until the shutdown begins, then 503 (if seen) until the listener closes: never back
    assert after == sorted(after, key=lambda s: {200: 0, 503: 1, None: 2}[s])
    assert _probe(f"{proc.admin_url}/health/live") == (None, None)


def test_readiness_checks_in_process(tmp_path: Path) -> None:
    """Deterministic states: before the logs load, while services start (listener not up
    yet), ready, a cluster check failing, shutting down."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/health/ready"
    seen: dict[str, tuple[int | None, Any]] = {}
    original = GroupService.start

    async def start_probed(self: GroupService) -> None:  # logs loaded, listener not yet up
        seen["services"] = await asyncio.to_thread(_probe, url)
        await original(self)

    async def main() -> None:
        config = BrokerConfig.load(None, [f"strom.admin.listener=127.0.0.1:{port}",
                                          "offsets.topic.num.partitions=1",
                                          "transaction.state.log.num.partitions=1"])  # fmt: skip
        broker = Broker(config, tmp_path / "data", ("127.0.0.1", 0))
        await broker._start_admin_listener()
        seen["before"] = await asyncio.to_thread(_probe, url)
        await broker.start()
        try:
            seen["ready"] = await asyncio.to_thread(_probe, url)
            # a lost controller; a partition the metadata cache says this broker leads that it
            # does not lead yet (as a controller's UpdateMetadata before its LeaderAndIsr
            # would); a check that raises. A hosted partition without any leader is no
            # reason to take this broker out of service.
            broker.metrics.replication.controller_known = lambda: False
            services = broker.services
            assert services is not None
            services.replicas.cache.set_partition("gone", 0, PartitionInfo(
                leader=-1, leader_epoch=3, replicas=(broker.node_id,), isr=()))
            seen["leaderless"] = (cluster_state.offline_hosted(services), None)
            services.replicas.cache.set_partition("pending", 0, PartitionInfo(
                leader=broker.node_id, leader_epoch=3, replicas=(broker.node_id,), isr=()))
            broker.health.add("isr_caught_up", lambda: 1 / 0)  # a check that raises fails
            seen["cluster"] = await asyncio.to_thread(_probe, url)
            broker.stopping = True
            seen["stopping"] = await asyncio.to_thread(_probe, url)
        finally:
            await broker.stop()
        seen["stopped"] = await asyncio.to_thread(_probe, url)

    GroupService.start = start_probed  # type: ignore[method-assign]
    try:
        asyncio.run(main())
    finally:
        GroupService.start = original  # type: ignore[method-assign]
    status, body = seen["before"]
    assert status == 503
    assert {"started", "logs_loaded", "listener", "coordinators_loaded"} <= set(body["failing"])
    status, body = seen["services"]
    assert status == 503 and body["checks"]["logs_loaded"] is True
    assert {"started", "listener", "coordinators_loaded"} <= set(body["failing"])
    status, body = seen["ready"]
    assert status == 200 and body["failing"] == [] and set(body["checks"]) == CHECKS
    status, body = seen["cluster"]
    assert status == 503
    assert body["failing"] == ["controller_known", "no_offline_partitions", "isr_caught_up"]
    assert seen["leaderless"] == (0, None)
    assert seen["stopping"][0] == 503 and "started" in seen["stopping"][1]["failing"]
    assert seen["stopped"] == (None, None)


def test_admin_port_in_use_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        out = subprocess.run(
            [sys.executable, "-m", "strom", "serve", "--data-dir", str(tmp_path / "d"),
             "--listen", f"127.0.0.1:{free_port()}", f"--admin-listener=127.0.0.1:{port}"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        f"strom serve: cannot listen on strom.admin.listener 127.0.0.1:{port}: "
        "Address already in use (choose another with --admin-listener HOST:PORT, or turn it "
        "off with --admin-listener=)"
    ]  # set explicitly: refused, with the hint (issue 21); the default port busy only warns
    assert not (tmp_path / "d").exists()  # refused before anything was created


@pytest.mark.parametrize("value", ["nonsense", "127.0.0.1:99999"])
def test_bad_admin_listener_value_is_one_line(tmp_path: Path, value: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "strom", "serve", "--data-dir", str(tmp_path / "d"),
         "--listen", f"127.0.0.1:{free_port()}", "--set", f"strom.admin.listener={value}"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2
    assert out.stderr.strip() == (
        f"strom serve: strom.admin.listener expects HOST:PORT or an empty value, got {value!r}"
    )
