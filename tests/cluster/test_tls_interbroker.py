"""A 3-broker cluster whose brokers talk to each other over a mutually authenticated TLS
listener (``inter.broker.listener.name=INTERNAL``, INTERNAL:SSL, ``ssl.client.auth=required``)
while clients use PLAINTEXT: the registrations put INTERNAL first, replication (fetchers,
controller requests, ISR changes) goes over it, and an acks=all idempotent producer loses,
duplicates or reorders nothing acknowledged across a leader kill -9 (history checked)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import pytest

from strom.testing.cluster import ClusterProcess, broker_host
from strom.testing.history import History
from strom.testing.process import free_port
from strom.testing.tls import make_tls_files
from strom.testing.workload import Writer, read_to_end
from strom.testing.zookeeper import zookeeper_available

pytestmark = pytest.mark.skipif(not zookeeper_available(), reason="needs the zookeeper package")


def _registration(cluster: ClusterProcess, broker_id: int) -> dict[str, object]:
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=cluster.zk_connect)
    zk.start(10)
    try:
        data, _ = zk.get(f"/brokers/ids/{broker_id}")
    finally:
        zk.stop()
        zk.close()
    found = json.loads(data)
    assert isinstance(found, dict)
    return found


def _peer_connections(hosts: set[str]) -> list[int]:
    """The remote ports of established TCP connections leaving one of ``hosts`` (brokers bind
    their outgoing connections to their own address)."""
    ports = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote, state = fields[1], fields[2], fields[3]
        if state != "01":  # ESTABLISHED
            continue
        ip = ".".join(str(int(local[i : i + 2], 16)) for i in (6, 4, 2, 0))
        if ip in hosts:
            ports.append(int(remote.split(":")[1], 16))
    return ports


def test_replication_over_a_tls_inter_broker_listener(tmp_path: Path) -> None:
    files = make_tls_files(tmp_path / "tls",
                           hosts=[broker_host(i) for i in range(1, 5)] + ["localhost"])  # fmt: skip
    internal: dict[int, int] = {}

    def listeners(broker_id: int, host: str, port: int) -> Mapping[str, str]:
        internal[broker_id] = free_port(host)
        return {
            "listeners": f"PLAINTEXT://{host}:{port},INTERNAL://{host}:{internal[broker_id]}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SSL",
            "inter.broker.listener.name": "INTERNAL",
            **files.listener_properties("INTERNAL", client_auth="required"),
        }

    history = History()
    with ClusterProcess(tmp_path, brokers=3, listener_settings=listeners,
                        settings={"auto.leader.rebalance.enable": "false"}) as cluster:  # fmt: skip
        for broker_id in (1, 2, 3):
            reg = _registration(cluster, broker_id)
            host = broker_host(broker_id)
            assert reg["endpoints"] == [
                f"INTERNAL://{host}:{internal[broker_id]}",
                f"PLAINTEXT://{host}:{cluster.broker(broker_id).port}",
            ]
            assert reg["listener_security_protocol_map"] == {
                "INTERNAL": "SSL",
                "PLAINTEXT": "PLAINTEXT",
            }
        # clients are told the PLAINTEXT endpoints only
        md = cluster.metadata()
        assert sorted((b.id, b.port) for b in md.brokers.values()) == sorted(
            (i, cluster.broker(i).port) for i in (1, 2, 3)
        )
        cluster.create_topic("tls", 1, 3, {"min.insync.replicas": "2"})
        cluster.wait_for_isr("tls", 0, {1, 2, 3}, timeout=60)  # followers fetch over TLS
        # the brokers' own connections go to INTERNAL ports only, never to a PLAINTEXT one
        between = _peer_connections({broker_host(i) for i in (1, 2, 3)})
        assert set(between) & set(internal.values())
        assert not set(between) & {cluster.broker(i).port for i in (1, 2, 3)}
        with Writer(cluster.bootstrap, "tls", history) as writer:
            writer.wait_acked(200, timeout=60)
            leader = cluster.leader_of("tls", 0)
            cluster.kill(leader)
            cluster.wait_for_leader("tls", 0, not_in={leader}, timeout=60)
            writer.wait_acked(writer.acked + 200, timeout=60)
            cluster.start_broker(leader)
            cluster.wait_for_isr("tls", 0, {1, 2, 3}, timeout=90)  # caught up over TLS again
            writer.wait_acked(writer.acked + 100, timeout=60)
        acked = writer.acked
        read_to_end(cluster.bootstrap, "tls", history)
    history.check().assert_ok()
    assert acked >= 500
