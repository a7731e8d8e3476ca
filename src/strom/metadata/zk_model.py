"""Kafka's ZooKeeper layout: the paths and JSON documents of a ZooKeeper-mode cluster.

The same layout is used in the embedded store on a single node, so that a data directory reads
the same whatever store holds it. Every document below is the one Kafka 2.x/3.x writes (field
names, ``version`` numbers), so tools that read Kafka's znodes read strom's:

``/cluster/id``                                  ``{"version": "1", "id": "<cluster id>"}``
``/brokers/ids/<id>`` (ephemeral)                :class:`BrokerRegistration`; a broker's *epoch*
                                                 is the node's ``Stat.created`` (czxid)
``/controller`` (ephemeral)                      ``{"version": 1, "brokerid": 1, "timestamp": "…"}``
``/controller_epoch``                            ``"7"``; its node version fences controller writes
``/brokers/topics/<t>``                          :class:`TopicAssignment` (read by
                                                 :mod:`strom.metadata.topics`)
``/brokers/topics/<t>/partitions/<p>/state``     :class:`PartitionState`; the node version is the
                                                 *partition epoch* (``zkVersion``)
``/config/topics/<t>``                           ``{"version": 1, "config": {…}}``
``/config/brokers/<id>|<default>``               dynamic broker configs, same shape
``/admin/delete_topics/<t>``                     a deletion the controller carries out
``/admin/reassign_partitions``                   ``{"version": 1, "partitions": [{"topic": t,
                                                 "partition": p, "replicas": [..]}]}``
``/admin/preferred_replica_election``            ``{"version": 1, "partitions": [{"topic", "partition"}]}``
``/latest_producer_id_block``                    ``{"version": 1, "broker": id, "block_start":
                                                 "0", "block_end": "999"}``
``/log_dir_event_notification/log_dir_event_<n>`` ``{"version": 1, "broker": id, "event": 1}``: a
                                                 log directory of the broker went offline
                                                 (Kafka's LogDirEventNotification)

Every write of a partition state by the controller is a multi-operation: a check of
``/controller_epoch`` at the version the controller read when it was elected, then the state's
set at its partition epoch; a controller that lost its office, or a stale view of the partition,
changes nothing.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

CLUSTER_ID_PATH = "/cluster/id"
BROKER_IDS_PATH = "/brokers/ids"
CONTROLLER_PATH = "/controller"
CONTROLLER_EPOCH_PATH = "/controller_epoch"
TOPICS_PATH = "/brokers/topics"
TOPIC_CONFIGS_PATH = "/config/topics"
BROKER_CONFIGS_PATH = "/config/brokers"
DELETE_TOPICS_PATH = "/admin/delete_topics"
REASSIGN_PATH = "/admin/reassign_partitions"
PREFERRED_ELECTION_PATH = "/admin/preferred_replica_election"
PRODUCER_ID_BLOCK_PATH = "/latest_producer_id_block"
LOG_DIR_EVENT_PATH = "/log_dir_event_notification"
LOG_DIR_EVENT_PREFIX = "log_dir_event_"
LOG_DIR_FAILURE_EVENT = 1  # Kafka's LogDirEventNotificationHandler.LogDirFailureEvent

NO_LEADER = -1  # Kafka's LeaderAndIsr.NoLeader
LEADER_DURING_DELETE = -2  # Kafka's LeaderAndIsr.LeaderDuringDelete


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS_PATH}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{TOPICS_PATH}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{TOPICS_PATH}/{topic}/partitions"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{TOPICS_PATH}/{topic}/partitions/{partition}/state"


def _json(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


@dataclass(frozen=True, slots=True)
class Endpoint:
    listener: str  # "PLAINTEXT"
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    def url(self) -> str:
        return f"{self.listener}://{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """``/brokers/ids/<id>``, Kafka's version-5 broker znode."""

    broker_id: int
    endpoints: tuple[Endpoint, ...]
    rack: str | None = None
    timestamp_ms: int = field(default_factory=lambda: int(time.time() * 1000))

    @property
    def host(self) -> str:
        return self.endpoints[0].host

    @property
    def port(self) -> int:
        return self.endpoints[0].port

    def to_json(self) -> bytes:
        first = self.endpoints[0]
        return _json({
            "version": 5,
            "host": first.host,
            "port": first.port,
            "jmx_port": -1,
            "timestamp": str(self.timestamp_ms),
            "endpoints": [e.url() for e in self.endpoints],
            "listener_security_protocol_map": {
                e.listener: e.security_protocol for e in self.endpoints
            },
            "rack": self.rack,
            "features": {},
        })  # fmt: skip

    @classmethod
    def from_json(cls, broker_id: int, data: bytes) -> BrokerRegistration:
        doc = json.loads(data)
        protocols: dict[str, str] = doc.get("listener_security_protocol_map") or {}
        endpoints = []
        for url in doc.get("endpoints") or [f"PLAINTEXT://{doc['host']}:{doc['port']}"]:
            listener, _, address = url.partition("://")
            host, _, port = address.rpartition(":")
            endpoints.append(Endpoint(listener, host.strip("[]"), int(port),
                                      protocols.get(listener, "PLAINTEXT")))  # fmt: skip
        return cls(broker_id, tuple(endpoints), doc.get("rack"), int(doc.get("timestamp", 0)))


@dataclass(frozen=True, slots=True)
class ControllerRegistration:
    """``/controller``: who holds the office (the epoch is in ``/controller_epoch``)."""

    broker_id: int
    timestamp_ms: int = field(default_factory=lambda: int(time.time() * 1000))

    def to_json(self) -> bytes:
        return _json({"version": 1, "brokerid": self.broker_id,
                      "timestamp": str(self.timestamp_ms)})  # fmt: skip

    @classmethod
    def from_json(cls, data: bytes) -> ControllerRegistration:
        doc = json.loads(data)
        return cls(int(doc["brokerid"]), int(doc.get("timestamp", 0)))


@dataclass(frozen=True, slots=True)
class PartitionState:
    """``/brokers/topics/<t>/partitions/<p>/state`` (Kafka's ``LeaderIsrAndControllerEpoch``).

    Invariants kept by the controller: ``leader`` is in ``isr`` (or is NO_LEADER); ``isr`` is a
    subset of the partition's replicas; ``leader_epoch`` grows by one at every leader change
    (and, as Kafka does, at every ISR change made by the controller itself).
    """

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    leader_recovery_state: int = 0  # 1 after an unclean election until the leader recovered

    def to_json(self) -> bytes:
        return _json({
            "controller_epoch": self.controller_epoch,
            "leader": self.leader,
            "version": 1,
            "leader_epoch": self.leader_epoch,
            "isr": list(self.isr),
            "leader_recovery_state": self.leader_recovery_state,
        })  # fmt: skip

    @classmethod
    def from_json(cls, data: bytes) -> PartitionState:
        doc = json.loads(data)
        return cls(int(doc["leader"]), int(doc["leader_epoch"]), tuple(doc["isr"]),
                   int(doc["controller_epoch"]), int(doc.get("leader_recovery_state", 0)))


def controller_epoch_to_bytes(epoch: int) -> bytes:
    return str(epoch).encode()


def controller_epoch_from_bytes(data: bytes) -> int:
    return int(data.decode() or 0)


def cluster_id_to_bytes(cluster_id: str) -> bytes:
    return _json({"version": "1", "id": cluster_id})


def cluster_id_from_bytes(data: bytes) -> str:
    return str(json.loads(data)["id"])


def log_dir_event_to_json(broker_id: int) -> bytes:
    """A log directory of ``broker_id`` failed (Kafka's notification document)."""
    return json.dumps({"version": 1, "broker": broker_id, "event": LOG_DIR_FAILURE_EVENT}).encode()


def log_dir_event_from_json(data: bytes) -> int | None:
    """The broker id of a log directory failure notification (None: not one)."""
    try:
        doc = json.loads(data)
        if int(doc.get("event", LOG_DIR_FAILURE_EVENT)) != LOG_DIR_FAILURE_EVENT:
            return None
        return int(doc["broker"])
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
