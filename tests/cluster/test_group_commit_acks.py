"""OffsetCommit is acks=-1 (issue 9), with ZooKeeper and three real brokers: with both
followers of the group's ``__consumer_offsets`` partition down (its ``min.insync.replicas`` set
to 2 after creation), a commit is refused (COORDINATOR_NOT_AVAILABLE: not replicated in time,
or NOT_ENOUGH_REPLICAS once the ISR shrank) and OffsetFetch does not show the refused offset
(the one appended but not replicated is an indefinite failure: once the ISR is the leader alone
the HW passes it, and a reload may show it, as in Kafka); with the followers back, commits
succeed again.

The fault is asserted (the ISR seen shrunk to the leader); a small acks=all history on another
topic goes through :func:`strom.testing.history.check`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from strom.broker.group.records import partition_for
from strom.testing.cluster import ClusterProcess
from strom.testing.history import History
from strom.testing.workload import Writer, read_to_end
from strom.testing.zookeeper import zookeeper_available
from tests.cluster.group_workload import coordinator_of
from tests.cluster.test_isr_faults import _set_min_isr

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not zookeeper_available(), reason="apt-get install -y zookeeper"),
]
ALL = {1, 2, 3}
SETTINGS = {"replica.lag.time.max.ms": "3000", "auto.leader.rebalance.enable": "false",
            "offsets.commit.timeout.ms": "3000"}  # fmt: skip
OFFSETS = "__consumer_offsets"
GROUP = "acks-group"
TOPIC = "orders"
NONE, COORDINATOR_NOT_AVAILABLE = 0, 15


def _conn(cluster: ClusterProcess, broker_id: int) -> Any:
    from strom.admin.wire import WireConnection

    return WireConnection(cluster.broker(broker_id).bootstrap, timeout=30)


def _commit(cluster: ClusterProcess, broker_id: int, offset: int) -> int:
    """A simple OffsetCommit (v8, generation -1) of ``offset`` for partition 0; its error."""
    from strom.protocol.messages import build, request_module

    m = request_module(8, 8)
    part = build(m.OffsetCommitRequestPartition, partition_index=0, committed_offset=offset,
                 committed_leader_epoch=-1, committed_metadata="")  # fmt: skip
    topic = build(m.OffsetCommitRequestTopic, name=TOPIC, partitions=(part,))
    with _conn(cluster, broker_id) as conn:
        resp = conn.request(8, 8, group_id=GROUP, generation_id_or_member_epoch=-1,
                            member_id="", group_instance_id=None, topics=(topic,))  # fmt: skip
    [[p]] = [t.partitions for t in resp.topics]
    return int(p.error_code)


def _fetch(cluster: ClusterProcess, broker_id: int) -> int:
    """OffsetFetch (v7) of partition 0: the committed offset (-1: none)."""
    from strom.protocol.messages import build, request_module

    m = request_module(9, 7)
    topic = build(m.OffsetFetchRequestTopic, name=TOPIC, partition_indexes=(0,))
    with _conn(cluster, broker_id) as conn:
        resp = conn.request(9, 7, group_id=GROUP, topics=(topic,), require_stable=False)
    assert int(resp.error_code) == NONE, resp
    [[p]] = [t.partitions for t in resp.topics]
    assert int(p.error_code) == NONE, resp
    return int(p.committed_offset)


def test_commit_refused_without_replicas_is_not_visible(tmp_path: Path) -> None:
    history = History()
    partition = partition_for(GROUP, 50)
    with ClusterProcess(tmp_path, brokers=3, settings=SETTINGS) as cluster:
        cluster.create_topic(TOPIC, 1, 3, {"min.insync.replicas": "1"})
        with Writer(cluster.bootstrap, TOPIC, history) as writer:
            writer.wait_acked(50, timeout=30)
        coordinator_of(cluster, GROUP)  # FindCoordinator creates __consumer_offsets
        cluster.wait_for_leader(OFFSETS, partition, timeout=60)
        cluster.wait_for_isr(OFFSETS, partition, ALL, timeout=60)
        leader = cluster.leader_of(OFFSETS, partition)
        _set_min_isr(cluster, leader, OFFSETS, 2)
        assert _commit(cluster, leader, 5) == NONE
        assert _fetch(cluster, leader) == 5

        followers = sorted(ALL - {leader})
        for broker_id in followers:
            cluster.kill(broker_id)
        # appended by the leader, not replicated: refused after offsets.commit.timeout.ms (or
        # NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrinks first), and not shown meanwhile
        assert _commit(cluster, leader, 9) == COORDINATOR_NOT_AVAILABLE
        assert _fetch(cluster, leader) == 5
        cluster.wait_for_isr(OFFSETS, partition, {leader}, timeout=60)  # the fault, seen
        assert cluster.leader_of(OFFSETS, partition) == leader
        # That record is in the log, and the HW passes it once the ISR is the leader alone: an
        # indefinite failure, as in Kafka — the partition's reload (the leader's new epoch) may
        # show it.
        before = _fetch(cluster, leader)
        assert before in (5, 9)
        # refused before the append now (NOT_ENOUGH_REPLICAS): nothing written, nothing shown
        assert _commit(cluster, leader, 10) == COORDINATOR_NOT_AVAILABLE
        assert _fetch(cluster, leader) == before

        for broker_id in followers:
            cluster.start_broker(broker_id)
        cluster.wait_for_isr(OFFSETS, partition, ALL, timeout=60)
        assert cluster.leader_of(OFFSETS, partition) == leader
        assert _commit(cluster, leader, 12) == NONE
        assert _fetch(cluster, leader) == 12
        read_to_end(cluster.bootstrap, TOPIC, history)
    report = history.check()
    report.assert_ok()
    assert report.acknowledged >= 50 and report.read >= report.acknowledged
