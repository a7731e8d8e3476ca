"""A KIP-848 consumer group through a kill -9 of its coordinator (ZooKeeper + three brokers).

Two members on ``group.protocol=consumer`` read a topic an idempotent acks=all producer writes
to, committing as they go. The group's coordinator (the leader of its ``__consumer_offsets``
partition) is killed. The new leader of that partition rebuilds the group from Kafka's
consumer-group records there: the members carry on at their epochs (the group epoch does not
start over, which it would if the group had been lost), commits go on through the new
coordinator and never go backwards, and a new member resumes exactly at the committed offsets.
The history checker judges the whole run: nothing acknowledged lost, nothing duplicated.

The test fails if its fault did not land: the killed broker must be the group's coordinator
before, and another broker after.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from strom.admin.wire import WireConnection
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
TOPIC = "kip848-orders"
PARTITIONS = 4
OFFSETS = "__consumer_offsets"
SESSION_MS = 8000


def describe_at_coordinator(cluster: Any, group: str) -> Any:
    """ConsumerGroupDescribe v1 sent to the group's coordinator itself (its group epoch is not
    in confluent-kafka's description)."""
    coordinator = coordinator_of(cluster, group)
    with WireConnection(cluster.broker(coordinator).bootstrap) as conn:
        [described] = conn.request(69, 1, group_ids=(group,), include_authorized_operations=False).groups
    assert described.error_code == 0, described
    return described


def test_consumer_group_survives_its_coordinator_kill(tmp_path: Path) -> None:
    group = "kip848-failover"
    partition = partition_for(group, 50)
    history = History()
    settings = {"auto.leader.rebalance.enable": "false",
                "group.consumer.heartbeat.interval.ms": "500",
                "group.consumer.min.heartbeat.interval.ms": "100",
                "group.consumer.session.timeout.ms": str(SESSION_MS),
                "group.consumer.min.session.timeout.ms": "1000"}  # fmt: skip
    with cluster_mod.ClusterProcess(tmp_path, brokers=3, settings=settings) as cluster:
        cluster.create_topic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
        with Writer(cluster.bootstrap, TOPIC, history) as writer:
            writer.wait_acked(100)
            readers = [GroupReader(cluster.bootstrap, TOPIC, group, history, name=f"c{i}",
                                   protocol="consumer").start() for i in range(2)]  # fmt: skip
            try:
                for r in readers:
                    r.wait_read(50, timeout=60)
                    r.wait_commits(2, timeout=60)
                cluster.wait_for_isr(OFFSETS, partition, {1, 2, 3}, timeout=30)
                before = describe_at_coordinator(cluster, group)
                assert before.group_state == "Stable" and len(before.members) == 2
                assert before.group_epoch >= 2  # two members joined one after the other
                victim = cluster.leader_of(OFFSETS, partition)
                assert coordinator_of(cluster, group) == victim  # the fault hits the coordinator
                commits_before = [r.commits_ok for r in readers]
                cluster.kill(victim)
                cluster.wait_for_leader(OFFSETS, partition, not_in={victim}, timeout=40)
                for r, n in zip(readers, commits_before, strict=True):
                    r.wait_commits(n + 3, timeout=60)
                    r.wait_read(r.read + 50, timeout=60)
                after = describe_at_coordinator(cluster, group)
                assert coordinator_of(cluster, group) != victim
                # rebuilt, not restarted: the same members at an epoch no lower than before
                assert after.group_epoch >= before.group_epoch
                assert {m.member_id for m in after.members} == {m.member_id for m in before.members}
                owned = [sorted(p for t in m.assignment.topic_partitions for p in t.partitions)
                         for m in after.members]  # fmt: skip
                assert sorted(p for ps in owned for p in ps) == list(range(PARTITIONS))
            finally:
                for r in readers:
                    r.stop()
            writer.wait_acked(writer.acked + 50, timeout=60)
        for r in readers:
            assert not r.backwards, r.backwards
        committed: dict[int, int] = {}
        for r in readers:
            for p, offset in r.acked_commits.items():
                committed[p] = max(committed.get(p, 0), offset)
        ends = end_offsets(cluster.bootstrap, TOPIC, PARTITIONS)
        last = GroupReader(cluster.bootstrap, TOPIC, group, history, name="c-last",
                           protocol="consumer").start()  # fmt: skip
        try:
            last.wait_position(ends, committed, timeout=60)
        finally:
            last.stop()
        for p, offset in committed.items():
            if offset < ends[p]:
                assert last.first_read.get(p) == offset, (p, offset, last.first_read)
    report = history.check()
    report.assert_ok()
    assert report.acknowledged >= 200 and report.read >= report.acknowledged
