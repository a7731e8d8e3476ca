"""A broker stopped past its ZooKeeper session must not act on a LeaderAndIsr sent before.

The nemesis finding of seed 1381750404 (docs/faults.md): the controller's preferred-leader
election sent broker B a LeaderAndIsr making it leader just as B was stopped (SIGSTOP); B's
session expired, the controller gave the partition to another broker, where the idempotent
producer's next batches were acknowledged. Once resumed, B read the old LeaderAndIsr before
its ZooKeeper client noticed the expiry, became leader at the superseded epoch and answered the
producer's following batch with OUT_OF_ORDER_SEQUENCE_NUMBER (its producer state lacked the
batches acknowledged by the other leader): fatal for librdkafka.

Here the test plays that controller request itself, deterministically: a LeaderAndIsr making a
follower B leader at the next leader epoch, with B's real broker epoch and the controller's
epoch, written to B's socket while B is stopped; B's session is let expire; B is resumed and
must answer STALE_BROKER_EPOCH without taking the leadership, and the cluster goes on with its
real leader (B re-registers and follows it).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from strom.metadata.topics import uuid_from_kafka
from strom.protocol.errors import ErrorCode
from strom.protocol.interbroker import leader_and_isr_v7_request as lai
from strom.protocol.messages import (
    RequestHeader,
    build,
    decode_response,
    encode_request,
    request_class,
)
from strom.testing.cluster import ClusterProcess, wait_until
from strom.testing.raw import RawConnection
from strom.testing.zookeeper import zookeeper_available

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(not zookeeper_available(), reason="apt-get install -y zookeeper"),
]

SESSION_MS = 3000
TOPIC = "stale-lai"


def _registered(cluster: ClusterProcess, asking: int) -> set[int]:
    """The brokers that broker ``asking``'s metadata lists."""
    from confluent_kafka.admin import AdminClient

    from strom.testing.workload import QUIET

    admin = AdminClient({"bootstrap.servers": cluster.broker(asking).bootstrap, "logger": QUIET})
    return set(admin.list_topics(timeout=5).brokers)


def test_leader_and_isr_read_after_the_session_expired_is_refused(tmp_path: Path) -> None:
    with ClusterProcess(tmp_path, brokers=3, session_timeout_ms=SESSION_MS) as cluster:
        cluster.create_topic(TOPIC, 1, 3)
        leader = cluster.leader_of(TOPIC, 0)
        controller = cluster.controller_id()
        stale = next(b for b in (1, 2, 3) if b not in (leader, controller))
        other = next(b for b in (1, 2, 3) if b != stale)
        zk = KazooClient(hosts=cluster.zk_connect)
        zk.start()
        try:
            _data, registration = zk.get(f"/brokers/ids/{stale}")
            state = json.loads(zk.get(f"/brokers/topics/{TOPIC}/partitions/0/state")[0])
            controller_epoch = int(zk.get("/controller_epoch")[0])
            topic_id = uuid_from_kafka(
                json.loads(zk.get(f"/brokers/topics/{TOPIC}")[0])["topic_id"]
            )
        finally:
            zk.stop()
            zk.close()
        epoch = int(state["leader_epoch"]) + 1  # newer than anything the broker knows
        request = build(
            request_class(4, 7), controller_id=controller, controller_epoch=controller_epoch,
            broker_epoch=registration.czxid, type_=0, live_leaders=(),
            topic_states=(build(lai.LeaderAndIsrTopicState, topic_name=TOPIC, topic_id=topic_id,
                                partition_states=(build(
                                    lai.LeaderAndIsrPartitionState, partition_index=0,
                                    controller_epoch=controller_epoch, leader=stale,
                                    leader_epoch=epoch, isr=(1, 2, 3),
                                    partition_epoch=int(state.get("version", 0)) + 1,
                                    replicas=(1, 2, 3), is_new=False),)),),
        )  # fmt: skip
        with RawConnection(cluster.broker(stale).bootstrap) as conn:
            conn.request(18, 0)  # ApiVersions: the broker has accepted this connection
            cluster.pause(stale)
            try:
                header = RequestHeader(4, 7, 4242, "stale-controller")
                conn.sock.sendall(encode_request(header, request))
                # the session expires: the other brokers drop the stopped one
                wait_until(
                    lambda: stale not in _registered(cluster, other),
                    SESSION_MS / 1000 * 6,
                    "the stopped broker's session expired",
                )
            finally:
                cluster.resume(stale)
            conn.sock.settimeout(SESSION_MS / 1000 + 30)
            correlation, response = decode_response(4, 7, conn.recv_frame())
        assert correlation == 4242
        assert int(response.error_code) == ErrorCode.stale_broker_epoch, (
            f"the resumed broker applied a LeaderAndIsr meant for its expired registration "
            f"({ErrorCode(int(response.error_code)).name})"
        )
        log = cluster.broker(stale).log_file.read_text(errors="replace")
        assert f"became leader of {TOPIC}-0" not in log
        assert "LeaderAndIsr of controller" in log and "that is gone" in log
        # it registers again, learns the real state and follows the real leader
        wait_until(lambda: stale in _registered(cluster, other), 60, "re-registered")
        wait_until(lambda: cluster.leader_of(TOPIC, 0) != stale
                   and f"following broker {cluster.leader_of(TOPIC, 0)} for {TOPIC}-0"
                   in cluster.broker(stale).log_file.read_text(errors="replace"),
                   60, "the resumed broker follows the real leader")  # fmt: skip
