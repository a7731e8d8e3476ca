"""Consumer groups through broker faults, with real processes (ZooKeeper + three brokers).

* kill -9 of the group's coordinator (the leader of the group's ``__consumer_offsets``
  partition, Kafka's ``abs(hashCode(group)) % 50``): the group goes on with a new coordinator,
  which loaded the group's offsets when it became that partition's leader; no acknowledged
  commit is lost (committed offsets never go backwards), a new member resumes exactly at the
  committed offsets, and every acknowledged message is consumed.
* rolling restart (SIGTERM, one broker at a time, each back in every ISR before the next) under
  an idempotent acks=all producer (RF 3, min.insync.replicas=2) and a consumer group: nothing
  acknowledged lost, nothing duplicated, commits never lost, the group goes on from its
  committed offsets.

Both run their history through :func:`strom.testing.history.check` and assert that the fault
happened (the killed broker was the coordinator; each broker really restarted).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from strom.broker.group.records import partition_for
from strom.testing.history import History
from strom.testing.workload import Writer
from strom.testing.zookeeper import zookeeper_available
from tests.cluster.group_workload import GroupReader, coordinator_of, end_offsets

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not zookeeper_available(), reason="apt-get install -y zookeeper"),
]
cluster_mod = pytest.importorskip("strom.testing.cluster")
SESSION_MS = 6000
TOPIC = "orders"
PARTITIONS = 3
OFFSETS = "__consumer_offsets"


def _cluster(tmp_path: Path) -> object:
    return cluster_mod.ClusterProcess(tmp_path, brokers=3, session_timeout_ms=SESSION_MS,
                                      settings={"auto.leader.rebalance.enable": "false"})  # fmt: skip


def _resume_and_drain(cluster: object, group: str, history: History,
                      before: GroupReader) -> GroupReader:  # fmt: skip
    """A new member of ``group`` resumes exactly at the offsets ``before`` committed last,
    and reads to the end of the topic."""
    ends = end_offsets(cluster.bootstrap, TOPIC, PARTITIONS)  # type: ignore[attr-defined]
    after = GroupReader(cluster.bootstrap, TOPIC, group, history, name="c2").start()  # type: ignore[attr-defined]
    try:
        after.wait_position(ends, before.acked_commits, timeout=60)
    finally:
        after.stop()
    for p, committed in before.acked_commits.items():
        if committed < ends[p]:
            assert after.first_read.get(p) == committed, (p, committed, after.first_read)
    assert not after.backwards, after.backwards
    return after


def test_group_goes_on_after_its_coordinator_is_killed(tmp_path: Path) -> None:
    group = "failover-group"
    partition = partition_for(group, 50)
    history = History()
    with _cluster(tmp_path) as cluster:  # type: ignore[attr-defined]
        cluster.create_topic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
        with Writer(cluster.bootstrap, TOPIC, history) as writer:
            writer.wait_acked(100)
            reader = GroupReader(cluster.bootstrap, TOPIC, group, history).start()
            try:
                reader.wait_read(300, timeout=60)
                reader.wait_commits(5, timeout=30)
                cluster.wait_for_isr(OFFSETS, partition, {1, 2, 3}, timeout=30)
                victim = cluster.leader_of(OFFSETS, partition)
                assert coordinator_of(cluster, group) == victim  # the fault hits the coordinator
                committed_before = dict(reader.acked_commits)
                commits_before = reader.commits_ok
                cluster.kill(victim)
                new_leader = cluster.wait_for_leader(OFFSETS, partition, not_in={victim},
                                                     timeout=SESSION_MS / 1000 + 20)  # fmt: skip
                # the group commits again, through the new coordinator
                reader.wait_commits(commits_before + 5, timeout=60)
                reader.wait_read(reader.read + 200, timeout=60)
                assert coordinator_of(cluster, group) == new_leader != victim
            finally:
                reader.stop()
            writer.wait_acked(writer.acked + 100, timeout=60)
        assert not reader.backwards, reader.backwards
        for p, offset in committed_before.items():
            assert reader.acked_commits[p] >= offset
        _resume_and_drain(cluster, group, history, reader)
    report = history.check()
    report.assert_ok()
    assert report.acknowledged >= 400 and report.read >= report.acknowledged


def test_rolling_restart_under_an_idempotent_producer_and_a_group(tmp_path: Path) -> None:
    group = "rolling-group"
    history = History()
    with _cluster(tmp_path) as cluster:  # type: ignore[attr-defined]
        cluster.create_topic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
        for p in range(PARTITIONS):
            cluster.wait_for_isr(TOPIC, p, {1, 2, 3}, timeout=30)
        offsets_partition = partition_for(group, 50)
        with Writer(cluster.bootstrap, TOPIC, history) as writer:
            writer.wait_acked(100)
            reader = GroupReader(cluster.bootstrap, TOPIC, group, history).start()
            try:
                reader.wait_commits(3, timeout=60)
                cluster.wait_for_isr(OFFSETS, offsets_partition, {1, 2, 3}, timeout=30)
                for broker_id in (1, 2, 3):
                    old_pid = cluster.broker(broker_id).pid
                    code = cluster.stop(broker_id)  # SIGTERM: controlled shutdown
                    assert code == 0, f"broker {broker_id} exited with {code}"
                    acked, commits = writer.acked, reader.commits_ok
                    writer.wait_acked(acked + 50, timeout=60)  # two replicas left: writes go on
                    cluster.start_broker(broker_id)
                    assert cluster.broker(broker_id).pid not in (None, old_pid)
                    for p in range(PARTITIONS):
                        cluster.wait_for_isr(TOPIC, p, {1, 2, 3}, timeout=60)
                    cluster.wait_for_isr(OFFSETS, offsets_partition, {1, 2, 3}, timeout=60)
                    reader.wait_commits(commits + 2, timeout=60)
                writer.wait_acked(writer.acked + 100, timeout=60)
            finally:
                reader.stop()
        assert not reader.backwards, reader.backwards
        _resume_and_drain(cluster, group, history, reader)
    report = history.check()
    report.assert_ok()  # nothing lost, nothing duplicated (idempotence), nothing reordered
    assert report.acknowledged >= 350 and report.read >= report.acknowledged
