"""Client quotas on a real 3-broker cluster (ZooKeeper): a quota set through one broker is
known to every broker and throttles the client on each of them, without a restart; it
survives a broker's kill -9; its removal through another broker reaches them all. Each change
is announced in ZooKeeper as Kafka's brokers expect it (``/config/changes``), read here with
kazoo as Kafka's ``ZkNodeChangeNotificationListener`` reads it."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from kazoo.client import KazooClient

from strom.testing.cluster import ClusterProcess, wait_until
from strom.testing.raw import RawConnection
from strom.testing.workload import QUIET
from strom.testing.zookeeper import zookeeper_available
from tests.integration.cli_helpers import Cli

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not zookeeper_available(), reason="apt-get install -y zookeeper"),
]
CLIENT = "metered"


def _described(bootstrap: str) -> dict[str, float]:
    """The quotas of client-id CLIENT as the broker at ``bootstrap`` answers them."""
    from strom.admin.wire import part

    with RawConnection(bootstrap) as conn:
        resp = conn.request(48, 1, strict=True, components=(
            part(48, 1, "ComponentData", entity_type="client-id", match_type=0, match=CLIENT),))
    return {v.key: float(v.value) for e in resp.entries or () for v in e.values}


def _throttled_by(bootstrap: str, topic: str, seconds: float) -> set[int]:
    """The ids of the brokers that throttled a producer of client id CLIENT."""
    brokers: set[int] = set()
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": CLIENT, "linger.ms": 5,
                         "batch.size": 16384, "logger": QUIET,
                         "throttle_cb": lambda event: brokers.add(int(event.broker_id))})  # fmt: skip
    end = time.monotonic() + seconds
    value = b"q" * 1000
    while time.monotonic() < end:
        if len(producer) > 300:
            producer.poll(0.005)
            continue
        producer.produce(topic, value)
        producer.poll(0)
    assert producer.flush(60) == 0
    return brokers


def _notifications(zk: KazooClient) -> list[tuple[int, dict[str, Any]]]:
    """/config/changes as Kafka's brokers read it: the sequence numbers and documents."""
    out = []
    for node in sorted(zk.get_children("/config/changes")):
        data, _stat = zk.get(f"/config/changes/{node}")
        out.append((int(node.removeprefix("config_change_")), json.loads(data)))
    return out


def test_a_quota_applies_on_every_broker_without_restart(tmp_path: Path) -> None:
    with ClusterProcess(tmp_path, brokers=3, settings={"quota.window.num": "3"}) as cluster:
        cluster.create_topic("metered", 6, 3)
        leaders = {cluster.leader_of("metered", p) for p in range(6)}
        first, second, third = (cluster.broker(i).bootstrap for i in (1, 2, 3))
        zk = KazooClient(hosts=cluster.zk_connect)
        zk.start(15)
        try:
            announced: list[list[str]] = []  # what a Kafka broker's children watch is told
            zk.ensure_path("/config/changes")
            zk.ChildrenWatch("/config/changes", lambda kids: announced.append(sorted(kids)))
            Cli(first).ok("quota", "alter", "--client", CLIENT, "--add-config",
                          "producer_byte_rate=60000")  # fmt: skip
            wait_until(lambda: len(announced) >= 2 and announced[-1], 15, "a change announced")
            [(set_at, note)] = _notifications(zk)
            assert note == {"version": 2, "entity_path": f"clients/{CLIENT}"}
            for broker in (first, second, third):  # every broker's cache, through its watches
                wait_until(lambda b=broker: _described(b) == {"producer_byte_rate": 60000.0}, 15,
                           f"the quota known at {broker}")  # fmt: skip
            # every leader throttles the client: each measures what it receives
            assert _throttled_by(cluster.bootstrap, "metered", 4) == leaders

            cluster.restart(2, kill=True)  # kill -9 and start again: read from ZooKeeper
            assert _described(second) == {"producer_byte_rate": 60000.0}

            Cli(third).ok("quota", "alter", "--client", CLIENT, "--delete-config",
                          "producer_byte_rate")  # fmt: skip
            for broker in (first, second, third):
                wait_until(lambda b=broker: _described(b) == {}, 15,
                           f"the removal seen at {broker}")  # fmt: skip
            *_, (removed_at, note) = _notifications(zk)
            assert removed_at > set_at
            assert note == {"version": 2, "entity_path": f"clients/{CLIENT}"}
        finally:
            zk.stop()
            zk.close()
        assert _throttled_by(cluster.bootstrap, "metered", 2) == set()
