"""Share groups through a fault (ZooKeeper + three brokers): kill -9 of the share coordinator.

The share coordinator of a share-partition is the leader of its ``__share_group_state``
partition (``abs(hashCode("group:topicId:partition")) % 50``). Phase 1: share consumers accept
records (each acceptance confirmed by ``commit_sync``) while a producer writes with acks=all
(RF 3, ``min.insync.replicas=2``); then they stop polling while holding what they acquired
last, and the coordinator's broker is killed with SIGKILL. Phase 2, once a new leader of that
``__share_group_state`` partition is elected: new consumers read everything that is left.

Checked: the fault hit the coordinator (it led the key's partition; a different broker leads it
afterwards); no acceptance confirmed in phase 1 comes back in phase 2 (the state survived the
coordinator's death); everything else — held in flight, or never delivered — does; the history
(:func:`strom.testing.history`) has nothing lost, duplicated or inconsistent; the group's start
offsets end at the log end (DescribeShareGroupOffsets through the new coordinator).
"""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import pytest
from confluent_kafka import AcknowledgeType

from strom.admin import wire
from strom.broker.share.coordinator import coordinator_key, partition_for_key
from strom.protocol.messages import build
from strom.testing.history import History
from strom.testing.workload import Writer
from strom.testing.zookeeper import zookeeper_available
from tests.integration.routing import any_broker
from tests.integration.share_helpers import BROKER_SETTINGS, Worker, set_group_configs, wait_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not zookeeper_available(), reason="apt-get install -y zookeeper"),
]
cluster_mod = pytest.importorskip("strom.testing.cluster")
SESSION_MS = 6000
TOPIC = "queue"
PARTITIONS = 2
STATE = "__share_group_state"
GROUP = "failover-share"


def _topic_id(bootstrap: str) -> uuid.UUID:
    meta = wire.request(any_broker(bootstrap), 3, 12, topics=None,
                        allow_auto_topic_creation=False, include_topic_authorized_operations=False)  # fmt: skip
    return next(t.topic_id for t in meta.topics if t.name == TOPIC)


def _start_offsets(bootstrap: str, timeout: float = 60.0) -> dict[int, int]:
    """partition -> the group's share-partition start offset (DescribeShareGroupOffsets v1,
    asked of the group's coordinator)."""
    from tests.integration.routing import coordinator_of

    where = coordinator_of(bootstrap, GROUP, timeout=timeout)
    mod = __import__("kio.schema.describe_share_group_offsets.v1.request", fromlist=["x"])
    resp = wire.request(where, 90, 1, groups=(build(mod.DescribeShareGroupOffsetsRequestGroup,
                                                    group_id=GROUP, topics=None),))  # fmt: skip
    (group,) = resp.groups
    assert int(group.error_code) == 0, group
    return {int(p.partition_index): int(p.start_offset)
            for t in group.topics if t.topic_name == TOPIC for p in t.partitions}  # fmt: skip


def test_acknowledgements_survive_the_share_coordinators_kill(tmp_path: Path) -> None:
    history = History()
    settings = {**BROKER_SETTINGS, "auto.leader.rebalance.enable": "false"}
    with cluster_mod.ClusterProcess(tmp_path, brokers=3, session_timeout_ms=SESSION_MS,
                                    settings=settings) as cluster:  # fmt: skip
        cluster.create_topic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
        for p in range(PARTITIONS):
            cluster.wait_for_isr(TOPIC, p, {1, 2, 3}, timeout=30)
        set_group_configs(cluster.bootstrap, GROUP, share_auto_offset_reset="earliest")
        key = (GROUP, _topic_id(cluster.bootstrap), 0)
        state_partition = partition_for_key(coordinator_key(key), 50)
        budget = threading.Semaphore(300)  # phase 1 accepts this many, then holds

        def decide(_msg):  # type: ignore[no-untyped-def]
            return AcknowledgeType.ACCEPT if budget.acquire(blocking=False) else None

        with Writer(cluster.bootstrap, TOPIC, history) as writer:
            writer.wait_acked(200, timeout=60)
            phase1 = [Worker(cluster.bootstrap, GROUP, TOPIC, f"p1-{i}", decide=decide,
                             on_record=lambda m, n=f"p1-{i}": history.record_message(m, n))
                      .start() for i in range(2)]  # fmt: skip
            try:
                wait_for(lambda: all(w.holding for w in phase1), 90, "phase 1 to accept 300, then hold")
                cluster.wait_for_isr(STATE, state_partition, {1, 2, 3}, timeout=30)
                victim = cluster.leader_of(STATE, state_partition)
                confirmed = {v for w in phase1 for v in w.accepted}
                assert len(confirmed) >= 250, len(confirmed)  # most of the 300 were confirmed
                cluster.kill(victim)
                new_leader = cluster.wait_for_leader(STATE, state_partition, not_in={victim},
                                                     timeout=SESSION_MS / 1000 + 30)  # fmt: skip
                assert new_leader != victim
                writer.wait_acked(writer.acked + 100, timeout=60)  # writes go on meanwhile
            finally:
                for w in phase1:
                    w.stop_event.set()
        for w in phase1:
            w.stop(timeout=60)
        acked = {a.value for a in history.acks}
        phase2 = [Worker(cluster.bootstrap, GROUP, TOPIC, f"p2-{i}",
                         on_record=lambda m, n=f"p2-{i}": history.record_message(m, n))
                  .start() for i in range(2)]  # fmt: skip
        try:
            def drained() -> bool:
                seen = {v for w in [*phase1, *phase2] for v in w.values()}
                return acked <= seen

            wait_for(drained, 120, "every acknowledged message delivered")
            ends = _log_ends(cluster)
            wait_for(lambda: _start_offsets(cluster.bootstrap) == ends, 60,
                     "the group's start offsets at the log end (everything accepted)")  # fmt: skip
        finally:
            for w in phase2:
                w.stop(timeout=60)
        again = {v for w in phase2 for v in w.values()} & confirmed
        assert again == set(), f"{len(again)} confirmed acceptances delivered again: {sorted(again)[:5]}"
        held = {v for w in phase1 for v in w.values()} - confirmed
        assert held <= {v for w in phase2 for v in w.values()}, "held records were not redelivered"
        assert cluster.leader_of(STATE, state_partition) != victim
    report = history.check()
    report.assert_ok()
    assert report.acknowledged >= 300


def _log_ends(cluster) -> dict[int, int]:  # type: ignore[no-untyped-def]
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "ends"})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=15)[1]
                for p in range(PARTITIONS)}  # fmt: skip
    finally:
        consumer.close()
