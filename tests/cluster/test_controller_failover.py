"""The controller with real processes: ZooKeeper and three brokers (strom.testing.cluster).

* kill -9 of a partition's leader: a new leader from the ISR, with a higher leader epoch,
  within the session timeout (plus the election);
* kill -9 of the controller (under an acks=all writer): a new controller with a higher epoch
  within the session timeout, the killed one's leaderships moved in a newer leader epoch,
  writes go on through its era and no acknowledged write is lost (history checked);
* the controller SIGSTOPped past its session and resumed: a new controller took over, a
  request carrying the old epoch is refused (STALE_CONTROLLER_EPOCH), and every broker's
  metadata agrees;
* SIGTERM of a leader: controlled shutdown moves its leaderships before it exits.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from strom.testing.zookeeper import zookeeper_available

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not zookeeper_available(), reason="apt-get install -y zookeeper"),
]
cluster_mod = pytest.importorskip("strom.testing.cluster")
SESSION_MS = 6000


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[object]:
    c = cluster_mod.ClusterProcess(tmp_path, brokers=3, session_timeout_ms=SESSION_MS,
                                   settings={"auto.leader.rebalance.enable": "false"})  # fmt: skip
    with c:
        yield c


def _zk_json(cluster: object, path: str) -> object:
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=cluster.zk_connect)  # type: ignore[attr-defined]
    zk.start(10)
    try:
        data, _ = zk.get(path)
    finally:
        zk.stop()
        zk.close()
    return json.loads(data)


def _state(cluster: object, topic: str, partition: int) -> dict[str, object]:
    found = _zk_json(cluster, f"/brokers/topics/{topic}/partitions/{partition}/state")
    assert isinstance(found, dict)
    return found


def _create(cluster: object, topic: str, partitions: int = 1,
            config: dict[str, str] | None = None) -> None:  # fmt: skip
    from confluent_kafka.admin import NewTopic

    admin = cluster.admin()  # type: ignore[attr-defined]
    admin.create_topics([NewTopic(topic, partitions, 3, config=config or {})])[topic].result(30)
    for p in range(partitions):
        cluster.wait_for_isr(topic, p, {1, 2, 3}, timeout=30)  # type: ignore[attr-defined]


def _metadata_from(broker: object, topic: str) -> dict[int, tuple[int, int, tuple[int, ...]]]:
    """partition -> (leader, leader epoch, isr) as this one broker answers Metadata."""
    from strom.admin.wire import WireConnection
    from strom.protocol.messages import build, request_module

    wanted = build(request_module(3, 12).MetadataRequestTopic, name=topic, topic_id=None)
    with WireConnection(broker.bootstrap) as conn:  # type: ignore[attr-defined]
        resp = conn.request(3, 12, topics=(wanted,),
                            allow_auto_topic_creation=False,
                            include_topic_authorized_operations=False)  # fmt: skip
    [t] = resp.topics
    return {int(p.partition_index): (int(p.leader_id), int(p.leader_epoch),
                                     tuple(sorted(int(b) for b in p.isr_nodes)))
            for p in t.partitions}  # fmt: skip


def test_leader_killed_new_leader_from_isr_with_higher_epoch(cluster: object) -> None:
    _create(cluster, "orders")
    before = _state(cluster, "orders", 0)
    leader = int(before["leader"])  # type: ignore[call-overload]
    start = time.monotonic()
    cluster.kill(leader)  # type: ignore[attr-defined]
    new = cluster.wait_for_leader("orders", 0, not_in={leader},  # type: ignore[attr-defined]
                                  timeout=SESSION_MS / 1000 + 10)
    took = time.monotonic() - start
    after = _state(cluster, "orders", 0)
    assert int(after["leader"]) == new and new in before["isr"]  # type: ignore[call-overload, operator]
    assert int(after["leader_epoch"]) > int(before["leader_epoch"])  # type: ignore[call-overload]
    assert leader not in after["isr"]  # type: ignore[operator]
    assert took < SESSION_MS / 1000 + 10


def test_controller_killed_new_one_with_higher_epoch(cluster: object) -> None:
    from strom.testing.history import History
    from strom.testing.workload import Writer, read_to_end

    _create(cluster, "k", partitions=3, config={"min.insync.replicas": "2"})
    first = cluster.controller_id()  # type: ignore[attr-defined]
    epoch = int(_zk_json(cluster, "/controller_epoch"))  # type: ignore[call-overload]
    before = {p: _state(cluster, "k", p) for p in range(3)}
    history = History()
    with Writer(cluster.bootstrap, "k", history) as writer:  # type: ignore[attr-defined]
        writer.wait_acked(100, timeout=60)
        start = time.monotonic()
        cluster.kill(first)  # type: ignore[attr-defined]
        cluster_mod.wait_until(lambda: cluster.controller_id() != first,  # type: ignore[attr-defined]
                               SESSION_MS / 1000 + 15, "a new controller")  # fmt: skip
        assert time.monotonic() - start < SESSION_MS / 1000 + 15
        assert int(_zk_json(cluster, "/controller_epoch")) > epoch  # type: ignore[call-overload]
        second = _zk_json(cluster, "/controller")
        assert isinstance(second, dict) and second["brokerid"] != first
        # the new controller's era: the killed one's leaderships moved in a newer leader epoch,
        # it left every ISR, and writes go on (acks=all, min.insync.replicas 2 of the 2 left)
        def moved() -> bool:
            states = {p: _state(cluster, "k", p) for p in range(3)}
            return all(int(s["leader"]) != first and first not in s["isr"]  # type: ignore[call-overload, operator]
                       for s in states.values())  # fmt: skip

        cluster_mod.wait_until(moved, 30, "the killed controller's leaderships and ISR places")
        for p, old in before.items():
            if int(old["leader"]) == first:  # type: ignore[call-overload]
                assert int(_state(cluster, "k", p)["leader_epoch"]) > int(old["leader_epoch"])  # type: ignore[call-overload]
        writer.wait_acked(writer.acked + 300, timeout=60)
    assert writer.acked >= 400
    read_to_end(cluster.bootstrap, "k", history)  # type: ignore[attr-defined]
    report = history.check()
    report.assert_ok()
    assert report.read >= report.acknowledged


def _controller_seen_by(broker: object) -> int:
    """The controller id this one broker's Metadata names (from its metadata cache)."""
    from strom.admin.wire import WireConnection

    with WireConnection(broker.bootstrap) as conn:  # type: ignore[attr-defined]
        resp = conn.request(3, 12, topics=(), allow_auto_topic_creation=False,
                            include_topic_authorized_operations=False)  # fmt: skip
    return int(resp.controller_id)


def test_paused_controller_is_deposed_and_its_epoch_refused(cluster: object) -> None:
    _create(cluster, "t", partitions=3)
    old = cluster.controller_id()  # type: ignore[attr-defined]
    old_epoch = int(_zk_json(cluster, "/controller_epoch"))  # type: ignore[call-overload]
    before = {p: _state(cluster, "t", p) for p in range(3)}
    led_by_old = [p for p, s in before.items() if int(s["leader"]) == old]  # type: ignore[call-overload]
    cluster.pause(old)  # type: ignore[attr-defined]
    try:
        cluster_mod.wait_until(
            lambda: int(_zk_json(cluster, "/controller_epoch")) > old_epoch,  # type: ignore[call-overload]
            SESSION_MS / 1000 * 3 + 15, "a new controller epoch")
    finally:
        cluster.resume(old)  # type: ignore[attr-defined]
    new_epoch = int(_zk_json(cluster, "/controller_epoch"))  # type: ignore[call-overload]
    new = _zk_json(cluster, "/controller")["brokerid"]  # type: ignore[index]
    assert new != old

    # A broker learns the new epoch only from the new controller's requests (as in Kafka), so
    # first wait until every broker, the resumed one too (it lost its session: it registers
    # again and the new controller tells it), names the new controller and agrees with the
    # partition states the new controller wrote.
    def agreed() -> bool:
        if any(_controller_seen_by(b) != new for b in cluster.brokers.values()):  # type: ignore[attr-defined]
            return False
        views = [_metadata_from(b, "t") for b in cluster.brokers.values()]  # type: ignore[attr-defined]
        states = {p: _state(cluster, "t", p) for p in range(3)}
        want = {p: (int(s["leader"]), int(s["leader_epoch"]), tuple(sorted(s["isr"])))  # type: ignore[call-overload, arg-type]
                for p, s in states.items()}
        return all(v == want for v in views)

    cluster_mod.wait_until(agreed, 30, "every broker's metadata agrees with the new controller")
    for p in led_by_old:  # the paused controller's leaderships moved, in a newer leader epoch
        after = _state(cluster, "t", p)
        assert int(after["leader_epoch"]) > int(before[p]["leader_epoch"]), (p, after)  # type: ignore[call-overload]
    # the deposed controller stood down when it came back (its session was gone)
    resigned = f"controller {old} (epoch {old_epoch}) resigns"
    cluster_mod.wait_until(lambda: resigned in cluster.brokers[old].log_file.read_text(),  # type: ignore[attr-defined]
                           10, "the deposed controller to resign")  # fmt: skip

    # now a request carrying the deposed controller's epoch is refused by every live broker
    from strom.admin.wire import WireConnection
    from strom.protocol.errors import ErrorCode

    for broker_id, broker in cluster.brokers.items():  # type: ignore[attr-defined]
        with WireConnection(broker.bootstrap) as conn:
            resp = conn.request(6, 8, controller_id=old, controller_epoch=old_epoch,
                                broker_epoch=-1, topic_states=(), live_brokers=())  # fmt: skip
        assert resp.error_code == ErrorCode.stale_controller_epoch, broker_id
        assert _controller_seen_by(broker) == new, broker_id  # and it changed nothing
    assert int(_zk_json(cluster, "/controller_epoch")) == new_epoch  # the old one stood down
    assert _zk_json(cluster, "/controller")["brokerid"] == new  # type: ignore[index]


def test_sigterm_moves_leadership_first(cluster: object) -> None:
    _create(cluster, "s", partitions=3)
    leaders = {p: int(_state(cluster, "s", p)["leader"]) for p in range(3)}  # type: ignore[call-overload]
    victim = leaders[0]
    start = time.monotonic()
    assert cluster.stop(victim) == 0  # type: ignore[attr-defined]
    took = time.monotonic() - start
    for p in range(3):
        state = _state(cluster, "s", p)
        assert int(state["leader"]) != victim and victim not in state["isr"], (p, state)  # type: ignore[call-overload, operator]
    assert took < 20
