"""Consumers read from the closest replica (KIP-392) on a real 3-broker cluster.

Brokers in racks r1, r2, r3 with ``replica.selector.class=RackAwareReplicaSelector``; a
confluent-kafka consumer with ``client.rack`` set to a follower's rack is sent there by the
leader and reads everything from it: the data is exact, and the follower's own /metrics show
it served the bytes while the leader served none (so the redirect really happened). A consumer
without a rack reads from the leader.
"""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from strom.testing.cluster import ClusterProcess
from strom.testing.process import free_port
from strom.testing.workload import QUIET
from strom.testing.zookeeper import zookeeper_available

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not zookeeper_available(), reason="apt-get install -y zookeeper"),
]
SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
N = 300


def _bytes_out(url: str, topic: str) -> float:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if (sample.name == "kafka_server_brokertopicmetrics_bytesout_total"
                    and sample.labels.get("topic") == topic):  # fmt: skip
                return sample.value
    return 0.0


def _consume(bootstrap: str, topic: str, rack: str | None) -> list[bytes]:
    conf = {"bootstrap.servers": bootstrap, "group.id": f"g-{rack}", "auto.offset.reset":
            "earliest", "enable.auto.commit": False, "logger": QUIET}  # fmt: skip
    if rack is not None:
        conf["client.rack"] = rack
    consumer = Consumer(conf)
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    try:
        for _ in range(600):
            if len(got) >= N:
                break
            msg = consumer.poll(0.1)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
    finally:
        consumer.close()
    return got


def test_a_consumer_reads_from_the_follower_in_its_rack(tmp_path: Path) -> None:
    admin_ports = {i: free_port() for i in (1, 2, 3)}
    with ClusterProcess(
        tmp_path, brokers=3, racks={1: "r1", 2: "r2", 3: "r3"},
        settings={"replica.selector.class": SELECTOR},
        broker_settings={i: {"strom.admin.listener": f"127.0.0.1:{port}"}
                         for i, port in admin_ports.items()},
    ) as cluster:  # fmt: skip
        cluster.create_topic("near", 1, 3)
        cluster.wait_for_isr("near", 0, {1, 2, 3}, timeout=60)
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                             "enable.idempotence": True, "logger": QUIET})  # fmt: skip
        values = [b"v%04d" % i for i in range(N)]
        for value in values:
            producer.produce("near", value, partition=0)
        assert producer.flush(60) == 0
        leader = cluster.leader_of("near", 0)
        follower = min(i for i in (1, 2, 3) if i != leader)
        urls = {i: f"http://127.0.0.1:{port}" for i, port in admin_ports.items()}
        before = {i: _bytes_out(url, "near") for i, url in urls.items()}

        assert _consume(cluster.bootstrap, "near", f"r{follower}") == values
        after = {i: _bytes_out(url, "near") for i, url in urls.items()}
        assert after[follower] - before[follower] >= sum(len(v) for v in values)
        assert after[leader] == before[leader]  # the leader only redirected

        # without a rack: the leader serves, as always
        assert _consume(cluster.bootstrap, "near", None) == values
        assert _bytes_out(urls[leader], "near") > after[leader]
