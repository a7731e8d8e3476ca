"""Which broker a raw-socket test must talk to: one broker or a cluster alike.

A real client routes each request: Produce / Fetch / ListOffsets / OffsetForLeaderEpoch to the
partition's leader, group and transaction requests to the coordinator, Metadata / ApiVersions
/ admin requests to any broker. Wire tests that build requests by hand must do the same, or
against a cluster (``broker.bootstrap`` = "h1:p1,h2:p2,h3:p3") they reach a broker that
answers NOT_LEADER_OR_FOLLOWER / NOT_COORDINATOR, or cannot even parse the address.

Each function answers one ``host:port``. On a single node that is always the bootstrap itself;
on a cluster it is found with Metadata v9 / FindCoordinator v3 sent to the first bootstrap
server, asked again until a deadline while the cluster has no answer yet (a new topic's
election, the first FindCoordinator creating ``__consumer_offsets`` or ``__transaction_state``).
"""

from __future__ import annotations

import socket
import time
from typing import Any

from strom.admin import wire
from strom.protocol.errors import ErrorCode

#: FindCoordinator key types
GROUP = 0
TRANSACTION = 1


def any_broker(bootstrap: str) -> str:
    """One live broker's address, for Metadata, ApiVersions, admin: the first bootstrap server
    that accepts a connection (a cluster test may have killed the first one, and a client
    bootstraps from whichever answers), else the first."""
    servers = [s.strip() for s in bootstrap.split(",")]
    if len(servers) > 1:
        for server in servers:
            host, _, port = server.rpartition(":")
            try:
                socket.create_connection((host, int(port)), timeout=2).close()
            except OSError:
                continue
            return server
    return servers[0]


def is_cluster(bootstrap: str) -> bool:
    return "," in bootstrap


def _metadata(bootstrap: str, topic: str):  # type: ignore[no-untyped-def]
    return wire.request(
        any_broker(bootstrap), 3, 9,
        topics=(wire.part(3, 9, "MetadataRequestTopic", name=topic),),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False,
        include_cluster_authorized_operations=False,
    )  # fmt: skip


def leader_of(bootstrap: str, topic: str, partition: int = 0, timeout: float = 30.0) -> str:
    """The address of the leader of ``topic``-``partition`` (waits while it has none)."""
    if not is_cluster(bootstrap):
        return bootstrap
    deadline = time.monotonic() + timeout
    last = "no answer"
    while True:
        resp = _metadata(bootstrap, topic)
        brokers = {int(b.node_id): f"{b.host}:{int(b.port)}" for b in resp.brokers}
        for t in resp.topics:
            if t.name != topic:
                continue
            last = ErrorCode(int(t.error_code)).name
            for p in t.partitions:
                if int(p.partition_index) == partition:
                    last = f"leader {int(p.leader_id)}, error {ErrorCode(int(p.error_code)).name}"
                    if int(p.error_code) == 0 and int(p.leader_id) in brokers:
                        return brokers[int(p.leader_id)]
        if time.monotonic() > deadline:
            raise AssertionError(f"no leader of {topic}-{partition} within {timeout} s: {last}")
        time.sleep(0.1)


def coordinator_of(bootstrap: str, key: str, key_type: int = GROUP, timeout: float = 60.0) -> str:
    """The address of the group (or transactional id) coordinator of ``key``."""
    if not is_cluster(bootstrap):
        return bootstrap
    deadline = time.monotonic() + timeout
    while True:
        resp = wire.request(any_broker(bootstrap), 10, 3, key=key, key_type=key_type)
        if int(resp.error_code) == 0:
            return f"{resp.host}:{int(resp.port)}"
        if time.monotonic() > deadline:
            raise AssertionError(f"no coordinator for {key!r} within {timeout} s: "
                                 f"{ErrorCode(int(resp.error_code)).name}")  # fmt: skip
        time.sleep(0.2)


def processes(broker: Any) -> list[Any]:
    """Every broker process of the module's ``broker`` (a BrokerProcess or a ClusterProcess)."""
    cluster = getattr(broker, "brokers", None)
    return list(cluster.values()) if cluster is not None else [broker]


def process_at(broker: Any, address: str) -> Any:
    """The broker process listening at ``address`` (its log file, its pid)."""
    for proc in processes(broker):
        if proc.bootstrap == address:
            return proc
    raise LookupError(f"no broker process at {address}")
