"""ducktape-style replication checks: Kafka's VerifiableProducer and VerifiableConsumer (the
tools Kafka's own system tests judge replication with, ``replication_test.py``) against a
3-broker strom cluster while a broker fails, their logs judged by strom's history checker.

Each case: a topic of 3 partitions, replication 3, ``min.insync.replicas=2``; the verifiable
producer writes with acks=all and idempotence at a steady rate and logs every acknowledgement
(``producer_send_success``: value, partition, offset) and failure; the verifiable consumer, in
a group, logs every record it reads (``record_data``, ``--verbose``). Meanwhile the leader of
partition 0 is killed with kill -9 and started again (hard bounce), or stopped with SIGTERM
and started again (clean bounce), or a follower is killed (hard shutdown). Then the
producer stops, the consumer reads until it has every acknowledged value, and
:class:`strom.testing.history.History` must find nothing lost, duplicated, reordered,
inconsistent or unexpected.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from strom.testing.cluster import ClusterProcess, wait_until
from strom.testing.history import History
from strom.testing.zookeeper import zookeeper_available
from tests.jvm.jvm import JavaProcess

pytestmark = [
    pytest.mark.jvm,
    pytest.mark.slow,
    pytest.mark.timeout(300),
    pytest.mark.skipif(not zookeeper_available(), reason="apt-get install -y zookeeper"),
]
PRODUCER = "org.apache.kafka.tools.VerifiableProducer"
CONSUMER = "org.apache.kafka.tools.VerifiableConsumer"


def events(log: Path) -> list[dict[str, Any]]:
    """The JSON events a verifiable tool printed so far (its own log lines left out)."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        if line.startswith("{") and line.endswith("}"):
            out.append(json.loads(line))
    return out


def acked(log: Path) -> set[str]:
    return {e["value"] for e in events(log) if e["name"] == "producer_send_success"}


def read_values(log: Path) -> set[str]:
    return {e["value"] for e in events(log) if e["name"] == "record_data"}


def producer_alive(producer: JavaProcess) -> bool:
    assert producer.running(), f"the verifiable producer exited:\n{producer.log_tail()}"
    return True


def build_history(topic: str, producer_log: Path, consumer_log: Path) -> History:
    history = History()
    produced = events(producer_log)
    sent = max((e.get("sent", 0) for e in produced if e["name"] == "tool_data"), default=0)
    for i in range(sent):  # the producer's values are its counter: "0", "1", ...
        history.attempt(topic, None, str(i).encode(), "verifiable-producer")
    for e in produced:
        if e["name"] == "producer_send_success":
            history.ack(topic, e["partition"], e["offset"], None, e["value"].encode(),
                        "verifiable-producer")  # fmt: skip
        elif e["name"] == "producer_send_error":
            history.fail(topic, e["value"].encode(), "verifiable-producer")
    for e in events(consumer_log):
        if e["name"] == "record_data":
            history.read(topic, e["partition"], e["offset"], None, e["value"].encode(),
                         "verifiable-consumer")  # fmt: skip
    return history


@pytest.fixture
def cluster(jvm_cluster: ClusterProcess) -> ClusterProcess:
    """The JVM tests' shared cluster (tests/jvm/conftest.py), every broker running."""
    for broker_id in set(jvm_cluster.brokers) - jvm_cluster.running_ids():
        jvm_cluster.start_broker(broker_id)
    return jvm_cluster


@pytest.mark.parametrize("fault", ["hard_bounce_leader", "clean_bounce_leader",
                                   "hard_shutdown_follower"])  # fmt: skip
def test_verifiable_clients_through_a_broker_fault(cluster: ClusterProcess, tmp_path: Path,
                                                    fault: str) -> None:  # fmt: skip
    topic = f"verifiable-{fault.replace('_', '-')}"
    cluster.create_topic(topic, 3, 3, {"min.insync.replicas": "2"})
    for p in range(3):
        cluster.wait_for_isr(topic, p, {1, 2, 3})
    config = tmp_path / "producer.properties"
    # the verifiable producer sets retries=0 unless told: idempotence needs them (ducktape
    # sets them too)
    config.write_text("enable.idempotence=true\nretries=2147483647\ndelivery.timeout.ms=120000\n"
                      "request.timeout.ms=10000\nlinger.ms=5\n")  # fmt: skip
    plog, clog = tmp_path / "producer.log", tmp_path / "consumer.log"
    consumer = JavaProcess(CONSUMER, ["--bootstrap-server", cluster.bootstrap, "--topic", topic,
                                      "--group-id", f"g-{topic}", "--verbose",
                                      "--reset-policy", "earliest", "--session-timeout", "10000"],
                           clog)  # fmt: skip
    producer = JavaProcess(PRODUCER, ["--bootstrap-server", cluster.bootstrap, "--topic", topic,
                                      "--throughput", "400", "--acks", "-1",
                                      "--command-config", str(config)], plog)  # fmt: skip
    leader = cluster.leader_of(topic, 0)
    victim = leader if "leader" in fault else next(
        r for r in cluster.partition_state(topic, 0).replicas if r != leader)  # fmt: skip
    try:
        consumer.start()
        producer.start()
        wait_until(lambda: producer_alive(producer) and len(acked(plog)) >= 1000, 90,
                   "1000 acknowledged before the fault")  # fmt: skip
        if fault == "clean_bounce_leader":
            cluster.stop(victim)
        else:
            cluster.kill(victim)
        if "leader" in fault:
            cluster.wait_for_leader(topic, 0, not_in={victim}, timeout=60)
        before = len(acked(plog))
        wait_until(lambda: len(acked(plog)) >= before + 1000, 90, "1000 more acknowledged")
        if "bounce" in fault:
            cluster.start_broker(victim)
            cluster.wait_for_isr(topic, 0, {1, 2, 3}, timeout=60)
            before = len(acked(plog))
            wait_until(lambda: len(acked(plog)) >= before + 500, 60, "500 more after it returned")
        producer.stop()  # SIGTERM: its shutdown hook logs shutdown_complete and tool_data
        assert any(e["name"] == "tool_data" for e in events(plog)), producer.log_tail()
        everything = acked(plog)
        wait_until(lambda: everything <= read_values(clog), 120,
                   "the consumer read every acknowledged value")  # fmt: skip
    finally:
        producer.kill()
        consumer.stop()
        if victim not in cluster.running_ids():
            cluster.start_broker(victim)
    report = build_history(topic, plog, clog).check()
    report.assert_ok()
    assert report.acknowledged >= 2000 and report.distinct_read >= report.acknowledged
