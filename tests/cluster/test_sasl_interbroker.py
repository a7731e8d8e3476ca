"""A 3-broker cluster whose brokers authenticate to each other with SCRAM-SHA-512 on a
SASL_PLAINTEXT inter-broker listener (``sasl.mechanism.inter.broker.protocol``, the broker's
own user made in ZooKeeper before any broker starts with ``strom user create --zookeeper``),
while clients log in with PLAIN on a SASL_PLAINTEXT listener of their own: replication
(fetchers, the controller's requests, ISR changes) goes over the authenticated listener, and
an acks=all idempotent producer loses, duplicates or reorders nothing acknowledged across a
leader kill -9 (history checked). A SCRAM user made through one broker logs in on the others."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from strom.testing.cluster import ClusterProcess, broker_host
from strom.testing.history import History
from strom.testing.process import free_port, wait_for_port
from strom.testing.workload import Writer, read_to_end
from strom.testing.zookeeper import ZooKeeperProcess, zookeeper_available

pytestmark = pytest.mark.skipif(not zookeeper_available(), reason="needs the zookeeper package")

BROKER_JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
               'username="broker" password="broker-secret";')  # fmt: skip
CLIENT_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
               'user_alice="alice-secret";')  # fmt: skip


def test_replication_over_a_sasl_inter_broker_listener(tmp_path: Path) -> None:
    zk = ZooKeeperProcess(tmp_path / "zk")
    zk.start(60)
    try:
        made = subprocess.run([sys.executable, "-m", "strom", "user", "create", "broker",
                               "--password", "broker-secret", "--mechanism", "SCRAM-SHA-512",
                               "--zookeeper", f"{zk.connect_string}/sasl"],
                              capture_output=True, text=True, timeout=60)  # fmt: skip
        assert made.returncode == 0, made.stderr
        internal: dict[int, int] = {}
        external: dict[int, int] = {}

        def listeners(broker_id: int, host: str, port: int) -> Mapping[str, str]:
            internal[broker_id] = free_port(host)
            external[broker_id] = free_port(host)
            return {
                "listeners": f"PLAINTEXT://{host}:{port},INTERNAL://{host}:{internal[broker_id]},"
                             f"CLIENTS://{host}:{external[broker_id]}",
                "listener.security.protocol.map":
                    "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_PLAINTEXT,CLIENTS:SASL_PLAINTEXT",
                "inter.broker.listener.name": "INTERNAL",
                "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
                "listener.name.internal.sasl.enabled.mechanisms": "SCRAM-SHA-512",
                "listener.name.internal.scram-sha-512.sasl.jaas.config": BROKER_JAAS,
                "listener.name.clients.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
                "listener.name.clients.plain.sasl.jaas.config": CLIENT_JAAS,
            }  # fmt: skip

        history = History()
        with ClusterProcess(tmp_path, brokers=3, zookeeper=zk.connect_string, chroot="/sasl",
                            session_timeout_ms=4000, listener_settings=listeners,
                            settings={"auto.leader.rebalance.enable": "false"}) as cluster:  # fmt: skip
            for broker_id in (1, 2, 3):
                assert wait_for_port(broker_host(broker_id), external[broker_id], 30)
            cluster.create_topic("sasl", 1, 3, {"min.insync.replicas": "2"})
            cluster.wait_for_isr("sasl", 0, {1, 2, 3}, timeout=60)  # fetchers authenticated
            for broker_id in (1, 2, 3):
                text = cluster.broker(broker_id).log_file.read_text(errors="replace")
                assert "failed authentication" not in text
                assert "cannot authenticate" not in text
            clients = ",".join(f"{broker_host(i)}:{external[i]}" for i in (1, 2, 3))
            sasl = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                    "sasl.username": "alice", "sasl.password": "alice-secret"}  # fmt: skip
            with Writer(clients, "sasl", history, config=sasl) as writer:
                writer.wait_acked(200, timeout=60)
                leader = cluster.leader_of("sasl", 0)
                cluster.kill(leader)
                cluster.wait_for_leader("sasl", 0, not_in={leader}, timeout=60)
                writer.wait_acked(writer.acked + 200, timeout=60)
                cluster.start_broker(leader)
                cluster.wait_for_isr("sasl", 0, {1, 2, 3}, timeout=90)  # caught up, logged in
                writer.wait_acked(writer.acked + 100, timeout=60)
            acked = writer.acked
            read_to_end(clients, "sasl", history, config=sasl)
            # a SCRAM user made through broker 1 logs in on broker 3 (its watch brought it)
            from confluent_kafka.admin import (
                AdminClient,
                ScramCredentialInfo,
                ScramMechanism,
                UserScramCredentialUpsertion,
            )

            admin = AdminClient({"bootstrap.servers": f"{broker_host(1)}:{cluster.broker(1).port}"})
            for future in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
                    "carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                    b"carol-pw")]).values():  # fmt: skip
                future.result(timeout=20)
            on_three = AdminClient({"bootstrap.servers": f"{broker_host(3)}:{external[3]}",
                                    "security.protocol": "SASL_PLAINTEXT",
                                    "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "carol",
                                    "sasl.password": "carol-pw"})  # fmt: skip
            assert len(on_three.list_topics(timeout=20).brokers) == 3
        history.check().assert_ok()
        assert acked >= 500
    finally:
        zk.stop()
