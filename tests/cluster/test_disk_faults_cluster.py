"""A failing and a full disk on a cluster's leader (issue 28): Kafka's log-dir failure rule.

The leader's log directory fails (EIO from the storage I/O seam, :mod:`strom.testing.diskfault`)
or fills up (a real tmpfs the test fills): the directory goes offline, the broker tells the
controller (``/log_dir_event_notification``), the controller learns the offline replicas from
the broker's KAFKA_STORAGE_ERROR answers to LeaderAndIsr, elects another leader from the ISR
and takes the replica out of the ISR; an idempotent acks=all producer goes on, and once the
broker restarts without the fault it rejoins the ISR. The history checker proves nothing
acknowledged was lost, duplicated or reordered; each test asserts its fault struck.
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from strom.testing.cluster import ClusterProcess
from strom.testing.diskfault import DiskFaults, fill, free_bytes, tmpfs, tmpfs_available
from strom.testing.history import History
from strom.testing.workload import Writer, read_to_end
from strom.testing.zookeeper import zookeeper_available

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not zookeeper_available(), reason="apt-get install -y zookeeper"),
]
ALL = {1, 2, 3}
SETTINGS = {"replica.lag.time.max.ms": "3000", "auto.leader.rebalance.enable": "false"}
TOPIC_CONFIG = {"min.insync.replicas": "2"}


def test_leader_disk_failure_moves_leadership_and_loses_nothing(tmp_path: Path) -> None:
    faults = DiskFaults(tmp_path / "faults")
    env = {i: faults.environment() for i in ALL}
    history = History()
    with ClusterProcess(tmp_path, brokers=3, settings=SETTINGS, broker_env=env) as cluster:
        cluster.create_topic("eio", 1, 3, TOPIC_CONFIG)
        cluster.wait_for_isr("eio", 0, ALL)
        leader = cluster.leader_of("eio", 0)
        with Writer(cluster.bootstrap, "eio", history) as writer:
            writer.wait_acked(200, timeout=30)
            rule = faults.fail(errno.EIO, ops=("write",),
                               path=str(cluster.broker(leader).data_dir / "eio-0"))  # fmt: skip
            new = cluster.wait_for_leader("eio", 0, not_in={leader}, timeout=30)
            assert faults.struck(rule) >= 1
            cluster.wait_for_isr("eio", 0, ALL - {leader}, timeout=30)
            writer.wait_acked(writer.acked + 300, timeout=60)  # writes go on at the new leader
            faults.clear()
            cluster.restart(leader, kill=True)  # the restart recovers the directory
            cluster.wait_for_isr("eio", 0, ALL, timeout=60)
            writer.wait_acked(writer.acked + 100, timeout=30)
        assert new != leader
        assert "offline" in cluster.broker(leader).log_tail(400)
        read_to_end(cluster.bootstrap, "eio", history)
    history.check().assert_ok()


def create_led_by(cluster: ClusterProcess, topic: str, first: int) -> None:
    """One partition, three replicas, ``first`` the preferred (so the first) leader."""
    from confluent_kafka.admin import NewTopic

    order = [first, *sorted(ALL - {first})]
    new = NewTopic(topic, num_partitions=1, replication_factor=-1, replica_assignment=[order],
                   config=TOPIC_CONFIG)
    admin = cluster.admin()  # kept while its future is pending
    admin.create_topics([new])[topic].result(30)
    cluster.wait_for_isr(topic, 0, ALL)


@pytest.mark.skipif(not tmpfs_available(), reason="needs root and tmpfs mounts")
def test_leader_disk_full_moves_leadership_and_loses_nothing(tmp_path: Path) -> None:
    history = History()
    leader_dir = tmp_path / "broker-1" / "data"
    with tmpfs(leader_dir, "48m") as disk, ClusterProcess(tmp_path, brokers=3,
                                                          settings=SETTINGS) as cluster:  # fmt: skip
        create_led_by(cluster, "full", 1)  # the broker whose disk fills leads
        assert cluster.leader_of("full", 0) == 1
        with Writer(cluster.bootstrap, "full", history) as writer:
            writer.wait_acked(200, timeout=30)
            fill(disk)
            assert free_bytes(disk) < 64 * 1024, "the disk did not fill"
            cluster.wait_for_leader("full", 0, not_in={1}, timeout=30)
            cluster.wait_for_isr("full", 0, ALL - {1}, timeout=30)
            writer.wait_acked(writer.acked + 300, timeout=60)
            assert "is offline after an I/O error" in cluster.broker(1).log_tail(2000)
            (disk / "filler").unlink()
            cluster.restart(1, kill=True)
            cluster.wait_for_isr("full", 0, ALL, timeout=60)
            writer.wait_acked(writer.acked + 100, timeout=30)
        read_to_end(cluster.bootstrap, "full", history)
    history.check().assert_ok()
