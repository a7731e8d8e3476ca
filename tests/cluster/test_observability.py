"""/metrics and /health/ready of a real three-broker cluster (ZooKeeper, strom.testing.cluster).

One history, four faults, each proved injected and each seen where an operator looks:

* start: every broker ready; exactly one reports ``activecontrollercount`` 1 (the one
  DescribeCluster names); each counts three live brokers;
* a follower killed (kill -9): the leader shrinks the ISR: ``isrshrinks`` +1,
  ``underreplicatedpartitions`` and ``underminisrpartitioncount`` 1; back, it rejoins:
  ``isrexpands`` +1, both gauges 0;
* the leader stopped (SIGTERM, controlled shutdown): the controller elects another leader:
  its ``leaderelectionrateandtimems_count`` +1, no unclean election; the stopped broker's
  admin listener stops answering;
* ZooKeeper paused (SIGSTOP): every broker loses its controller: ``/health/ready`` 503 naming
  ``controller_known``, no active controller anywhere; resumed (SIGCONT): ready again with
  exactly one controller.

A producer (acks=all, idempotent) writes throughout; nothing acknowledged is lost, duplicated
or reordered (:func:`strom.testing.history.check`).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.testing.cluster import ClusterProcess, broker_host, wait_until
from strom.testing.history import History
from strom.testing.process import free_port
from strom.testing.workload import Writer, read_to_end
from strom.testing.zookeeper import four_letter_word, zookeeper_available
from tests.integration.admin_http import get_json, scrape

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not zookeeper_available(), reason="apt-get install -y zookeeper"),
    pytest.mark.skipif(importlib.util.find_spec("strom.controller") is None,
                       reason="needs the controller"),
]
RM = "kafka_server_replicamanager_"
CTL = "kafka_controller_kafkacontroller_activecontrollercount"
ELECTIONS = "kafka_controller_controllerstats_leaderelectionrateandtimems_count"
UNCLEAN = "kafka_controller_controllerstats_uncleanleaderelections_total"
TOPIC = "watched"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ClusterProcess]:
    admin = {i: {"strom.admin.listener": f"{broker_host(i)}:{free_port(broker_host(i))}"}
             for i in (1, 2, 3)}  # fmt: skip
    c = ClusterProcess(tmp_path, brokers=3, broker_settings=admin, settings={
        "auto.leader.rebalance.enable": "false", "replica.lag.time.max.ms": "1500",
        # internal topics on one replica each: the gauges below count the watched topic alone
        "offsets.topic.replication.factor": "1", "offsets.topic.num.partitions": "3",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.num.partitions": "3"})
    with c:
        c.urls = {i: f"http://{admin[i]['strom.admin.listener']}" for i in (1, 2, 3)}  # type: ignore[attr-defined]
        yield c


def _ready(url: str) -> tuple[int | None, Any]:
    try:
        return get_json(f"{url}/health/ready", timeout=3)
    except OSError:
        return None, None


def _controllers(urls: dict[int, str]) -> dict[int, float]:
    return {i: scrape(u).get(CTL) for i, u in urls.items()}


def test_metrics_and_health_follow_the_cluster(cluster: ClusterProcess) -> None:
    urls: dict[int, str] = cluster.urls  # type: ignore[attr-defined]
    for i, url in urls.items():
        status, body = _ready(url)
        assert status == 200, (i, body)
    controller = cluster.controller_id()
    wait_until(lambda: _controllers(urls) == {i: float(i == controller) for i in urls}, 15,
               f"activecontrollercount 1 on broker {controller} only")  # fmt: skip
    assert {i: scrape(u).get("kafka_brokers") for i, u in urls.items()} == {1: 3, 2: 3, 3: 3}

    leader, follower = [i for i in (1, 2, 3) if i != controller]
    admin = cluster.admin()
    from confluent_kafka.admin import NewTopic

    admin.create_topics([NewTopic(TOPIC, num_partitions=1, replication_factor=-1, replica_assignment=[[leader, follower, controller]],
                                  config={"min.insync.replicas": "3"})])[TOPIC].result(30)  # fmt: skip
    assert cluster.leader_of(TOPIC) == leader
    cluster.wait_for_isr(TOPIC, 0, {1, 2, 3})
    history = History()
    # acks=all with min.insync.replicas 3 refuses writes while the ISR is short: the writer
    # retries (idempotent) until the follower is back, and loses nothing
    with Writer(cluster.bootstrap, TOPIC, history) as writer:
        writer.wait_acked(50, timeout=60)
        before = scrape(urls[leader])
        assert before.get(RM + "leadercount") >= 1
        # acks=all is parked until the followers have the batch: Kafka's RemoteTime
        assert before.get("kafka_network_requestmetrics_remotetimems_sum", request="Produce") > 0
        assert before.get(RM + "underreplicatedpartitions") == 0

        cluster.kill(follower)  # kill -9
        assert follower not in cluster.running_ids()

        def shrunk() -> Any:
            s = scrape(urls[leader])
            return s if s.get(RM + "underreplicatedpartitions") == 1 else None

        during = wait_until(shrunk, 30, "the leader reports an under-replicated partition")
        assert during.get(RM + "isrshrinks_total") == before.get(RM + "isrshrinks_total") + 1
        assert during.get(RM + "underminisrpartitioncount") == 1
        cluster.wait_for_isr(TOPIC, 0, {leader, controller})

        cluster.start_broker(follower)
        cluster.wait_for_isr(TOPIC, 0, {1, 2, 3}, timeout=60)
        after = wait_until(lambda: (lambda s: s if s.get(RM + "underreplicatedpartitions") == 0
                                    else None)(scrape(urls[leader])), 30, "ISR whole again")
        assert after.get(RM + "isrexpands_total") == before.get(RM + "isrexpands_total") + 1
        assert after.get(RM + "underminisrpartitioncount") == 0
        writer.wait_acked(writer.acked + 50, timeout=60)

        elections = scrape(urls[controller])
        assert cluster.stop(leader) == 0  # SIGTERM: controlled shutdown moves the leadership
        assert _ready(urls[leader]) == (None, None)
        new_leader = cluster.wait_for_leader(TOPIC, 0, not_in={leader})
        assert new_leader in (follower, controller)
        moved = scrape(urls[controller])
        assert moved.get(ELECTIONS) == elections.get(ELECTIONS) + 1
        assert moved.get(UNCLEAN) == 0
        cluster.start_broker(leader)
        cluster.wait_for_isr(TOPIC, 0, {1, 2, 3}, timeout=60)
        writer.wait_acked(writer.acked + 50, timeout=60)

    # ZooKeeper paused: no broker can know a controller
    zk = cluster.zookeeper
    zk.pause()
    try:
        with pytest.raises(OSError):
            four_letter_word("127.0.0.1", zk.port, "ruok", timeout=1)  # the fault is real

        def lost() -> dict[int, Any] | None:
            seen = {i: _ready(u) for i, u in urls.items()}
            return seen if all(s == 503 for s, _ in seen.values()) else None

        seen = wait_until(lost, 30, "every broker not ready without ZooKeeper")
        for _status, body in seen.values():
            assert "controller_known" in body["failing"]
        assert sum(_controllers(urls).values()) == 0
    finally:
        zk.resume()
    wait_until(lambda: all(_ready(u)[0] == 200 for u in urls.values()), 60,
               "every broker ready again")  # fmt: skip
    wait_until(lambda: sum(_controllers(urls).values()) == 1, 30, "one active controller")
    read_to_end(cluster.bootstrap, TOPIC, history)
    report = history.check()
    report.assert_ok()
    assert report.acknowledged == writer.acked >= 150
