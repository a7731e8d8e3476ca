"""A partition's leader cut off from ZooKeeper and the other brokers by the network (issue 9).

Three brokers on 127.0.0.2..4, a topic of replication factor 3 with ``min.insync.replicas=2``
and an idempotent ``acks=all`` producer writing throughout. The leader is cut off with nftables
(clients still reach it, as in a partition of the cluster network only) for longer than the
ZooKeeper session timeout, then healed. What must hold:

* the rules dropped packets, ZooKeeper's included (the fault was real);
* the controller elected a new leader from the ISR, in a higher leader epoch;
* the old leader, still reachable by clients, acknowledges no ``acks=all`` write while it is
  cut off (the followers no longer fetch from it: its high-water mark cannot move);
* after the heal it rejoins as a follower of the new leader, truncates what only it had and is
  back in the ISR; writes go on;
* no acknowledged write is lost, duplicated or reordered (``history.check`` over everything
  read back to the high-water mark), and the three replicas hold the same batches.
"""

from __future__ import annotations

import datetime
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from kio.index import load_payload_module
from kio.static.constants import EntityType

from strom.protocol import record_batch as rb
from strom.protocol.batch_header import iter_batches
from strom.protocol.errors import ErrorCode
from strom.protocol.messages import build
from strom.testing import netfault
from strom.testing.history import History
from strom.testing.raw import RawConnection
from strom.testing.workload import Writer, read_to_end
from strom.testing.zookeeper import zookeeper_available

NO_NFT = netfault.available()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.serial,  # elections timed against session timeouts while the network is cut
    pytest.mark.skipif(not zookeeper_available(), reason="apt-get install -y zookeeper"),
    pytest.mark.skipif(NO_NFT is not None, reason=NO_NFT or ""),
]
cluster_mod = pytest.importorskip("strom.testing.cluster")
SESSION_MS = 6000
TOPIC = "orders"


def _zk_state(cluster: Any) -> dict[str, Any]:
    """The partition's state node as the controller wrote it (ZooKeeper is the truth: a cut
    off broker's Metadata answers are stale by design)."""
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=cluster.zk_connect)
    zk.start(10)
    try:
        data, _ = zk.get(f"/brokers/topics/{TOPIC}/partitions/0/state")
    finally:
        zk.stop()
        zk.close()
    found = json.loads(data)
    assert isinstance(found, dict)
    return found


def _produce_raw(bootstrap: str, value: bytes, timeout_s: float) -> Any:
    """One acks=all Produce straight to ``bootstrap`` (no client retries, no leader lookup)."""
    mod = load_payload_module(0, 9, EntityType.request)
    batch = rb.build_batch([(None, value, [], int(time.time() * 1000))])
    data = build(mod.TopicProduceData, name=TOPIC, partition_data=(
        build(mod.PartitionProduceData, index=0, records=batch),))  # fmt: skip
    with RawConnection(bootstrap, timeout=timeout_s + 10) as conn:
        resp = conn.request(0, 9, transactional_id=None, acks=-1,
                            timeout=datetime.timedelta(seconds=timeout_s),
                            topic_data=(data,))  # fmt: skip
    return resp.responses[0].partition_responses[0]


def _log_size(broker: Any) -> int | None:
    """The partition's log size on ``broker`` (DescribeLogDirs), None if it does not host it."""
    with RawConnection(broker.bootstrap) as conn:
        resp = conn.request(35, 1, topics=None)
    for result in resp.results:
        for topic in result.topics:
            if topic.name == TOPIC:
                for p in topic.partitions:
                    if int(p.partition_index) == 0:
                        return int(p.partition_size)
    return None


def _batches(data_dir: Path) -> list[tuple[int, int, int, int]]:
    """(base offset, last offset, partition leader epoch, CRC) of every batch on disk."""
    out = []
    for segment in sorted((data_dir / f"{TOPIC}-0").glob("*.log")):
        for header, _view in iter_batches(segment.read_bytes()):
            out.append((header.base_offset, header.last_offset, header.partition_leader_epoch,
                        header.crc))  # fmt: skip
    return out


def test_leader_cut_off_is_replaced_rejoins_as_follower_and_no_ack_is_lost(tmp_path: Path) -> None:
    history = History()
    cluster = cluster_mod.ClusterProcess(
        tmp_path, brokers=3, session_timeout_ms=SESSION_MS,
        settings={"auto.leader.rebalance.enable": "false"},
    )  # fmt: skip
    with cluster:
        cluster.create_topic(TOPIC, 1, 3, config={"min.insync.replicas": "2"})
        cluster.wait_for_isr(TOPIC, 0, {1, 2, 3}, timeout=30)
        before = _zk_state(cluster)
        old, old_epoch = int(before["leader"]), int(before["leader_epoch"])
        writer = Writer(cluster.bootstrap, TOPIC, history,
                        config={"topic.metadata.refresh.interval.ms": 1000})  # fmt: skip
        with writer:
            writer.wait_acked(200, timeout=60)
            fault = cluster.isolate(old)
            cut_at = time.monotonic()
            try:
                after = cluster_mod.wait_until(
                    lambda: (s := _zk_state(cluster))["leader"] not in (old, -1) and s,
                    SESSION_MS / 1000 + 30, "a new leader in ZooKeeper")  # fmt: skip
                new = int(after["leader"])
                assert new in before["isr"]
                assert int(after["leader_epoch"]) > old_epoch
                assert old not in after["isr"] and len(after["isr"]) == 2

                # the old leader, still reachable from clients, acknowledges nothing any more
                stray = b"stray-to-the-old-leader"
                history.attempt(TOPIC, None, stray, "raw")
                answer = _produce_raw(cluster.broker(old).bootstrap, stray, timeout_s=2.0)
                # appended and then timed out waiting for followers that no longer fetch, or
                # refused before the append
                refused = (ErrorCode.not_enough_replicas, ErrorCode.not_leader_or_follower)
                assert answer.error_code in (ErrorCode.request_timed_out, *refused), answer
                history.fail(TOPIC, stray, "raw")

                # hold the cut past the old leader's session timeout
                time.sleep(max(0.0, SESSION_MS / 1000 * 1.5 - (time.monotonic() - cut_at)))
                counts = fault.counters()
                me = cluster.broker(old)
                zk = cluster.zk_connect.split("/")[0]
                assert counts[f"{me.host}:* > {zk}"] > 0, counts  # its ZooKeeper session too
                for follower in set(before["isr"]) - {old}:  # their fetches to it
                    rule = f"{cluster.broker(follower).host}:* > {me.bootstrap}"
                    assert counts[rule] > 0, counts
            finally:
                fault.heal()
            assert fault.dropped() > 0

            # the old leader rejoins as a follower and is back in the ISR (as the controller
            # wrote it: the old leader's own Metadata still shows its pre-cut view until the
            # new controller reaches it); writes go on
            cluster_mod.wait_until(lambda: sorted(_zk_state(cluster)["isr"]) == [1, 2, 3], 90,
                                   "the old leader back in the ISR")  # fmt: skip
            writer.wait_acked(writer.acked + 200, timeout=90)
        healed = _zk_state(cluster)
        assert int(healed["leader"]) == new and int(healed["leader_epoch"]) >= int(
            after["leader_epoch"]
        )
        read_to_end(cluster.bootstrap, TOPIC, history)
        report = history.check()
        report.assert_ok()
        assert report.acknowledged >= 400 and report.read >= report.acknowledged
        assert stray not in {r.value for r in history.reads}
        if answer.error_code == ErrorCode.request_timed_out:  # it was in the old leader's log:
            cut = re.findall(rf"truncating {TOPIC}-0 from (\d+) to (\d+)",  # it cut it off
                             cluster.broker(old).log_file.read_text())  # fmt: skip
            assert any(int(to) <= answer.base_offset < int(frm) for frm, to in cut), cut

        # every replica has every batch: wait until the followers have fetched the last ones
        sizes: dict[int, int | None] = {}

        def same_size() -> bool:
            sizes.update({i: _log_size(b) for i, b in cluster.brokers.items()})
            return len(set(sizes.values())) == 1 and None not in sizes.values()

        cluster_mod.wait_until(same_size, 30, "the replicas' logs to reach one size")
    # stopped: the logs on disk, batch by batch, are the same on the three brokers
    logs = {i: _batches(b.data_dir) for i, b in cluster.brokers.items()}
    assert logs[old] == logs[new], (len(logs[old]), len(logs[new]))
    assert all(batches == logs[new] for batches in logs.values())
    epochs = [epoch for _b, _l, epoch, _c in logs[new]]
    assert old_epoch in epochs and int(after["leader_epoch"]) in epochs
    assert epochs == sorted(epochs)
