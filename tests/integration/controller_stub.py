"""The test as the controller: it sends brokers Kafka's controller requests itself.

:class:`FakeController` tells brokers started with ``strom.controller.enable=false`` what to
lead and follow (UpdateMetadata v8, LeaderAndIsr v7, StopReplica v4 over a plain socket), as a
ZooKeeper-mode Kafka controller would. :class:`AlterPartitionStub` is the controller's
AlterPartition endpoint: a listener (broker id 0 in the live brokers the test announces) that
accepts every ISR change the leaders propose and records it; any other request closes the
connection (clients never need broker 0: it leads nothing).
"""

from __future__ import annotations

import socket
import socketserver
import struct
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

from strom.protocol.interbroker import leader_and_isr_v7_request as lai
from strom.protocol.interbroker import stop_replica_v4_request as sr
from strom.protocol.interbroker import update_metadata_v8_request as um
from strom.protocol.messages import build, decode_request, encode_response, response_class
from strom.testing import BrokerProcess
from strom.testing.raw import RawConnection

STUB_ID = 0


@dataclass
class PartitionState:
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    partition_epoch: int = 0


@dataclass
class FakeController:
    brokers: dict[int, BrokerProcess]
    stub: AlterPartitionStub | None = None
    epoch: int = 1
    topic_ids: dict[str, uuid.UUID] = field(default_factory=dict)

    def _live(self) -> tuple[Any, ...]:
        live = [(i, "127.0.0.1", b.port) for i, b in self.brokers.items() if b.pid is not None]
        if self.stub is not None:
            live.append((STUB_ID, "127.0.0.1", self.stub.port))
        return tuple(build(um.UpdateMetadataBroker, id_=i, rack=None, endpoints=(
            build(um.UpdateMetadataEndpoint, port=port, host=host, listener="PLAINTEXT",
                  security_protocol=0),)) for i, host, port in live)  # fmt: skip

    def update_metadata(self, states: dict[str, dict[int, PartitionState]],
                        to: list[int] | None = None) -> dict[int, int]:  # fmt: skip
        """UpdateMetadata to ``to`` (every running broker); broker id -> error code."""
        topics = tuple(build(um.UpdateMetadataTopicState, topic_name=t, topic_id=self._id(t),
                             partition_states=tuple(build(
                                 um.UpdateMetadataPartitionState, partition_index=p,
                                 controller_epoch=self.epoch, leader=s.leader,
                                 leader_epoch=s.leader_epoch, isr=tuple(s.isr),
                                 zk_version=s.partition_epoch, replicas=tuple(s.replicas),
                                 offline_replicas=()) for p, s in parts.items()))
                       for t, parts in states.items())  # fmt: skip
        controller = STUB_ID if self.stub is not None else -1
        out = {}
        for i in to if to is not None else self._running():
            out[i] = int(self._request(i, 6, 8, controller_id=controller,
                                       controller_epoch=self.epoch, broker_epoch=-1,
                                       topic_states=topics, live_brokers=self._live()).error_code)
        return out

    def leader_and_isr(self, broker: int, states: dict[str, dict[int, PartitionState]],
                       epoch: int | None = None) -> Any:  # fmt: skip
        topics = tuple(build(lai.LeaderAndIsrTopicState, topic_name=t, topic_id=self._id(t),
                             partition_states=tuple(build(
                                 lai.LeaderAndIsrPartitionState, partition_index=p,
                                 controller_epoch=self.epoch, leader=s.leader,
                                 leader_epoch=s.leader_epoch, isr=tuple(s.isr),
                                 partition_epoch=s.partition_epoch, replicas=tuple(s.replicas),
                                 is_new=False) for p, s in parts.items()))
                       for t, parts in states.items())  # fmt: skip
        return self._request(broker, 4, 7, controller_id=STUB_ID,
                             controller_epoch=self.epoch if epoch is None else epoch,
                             broker_epoch=-1, type_=0, topic_states=topics, live_leaders=())

    def stop_replica(self, broker: int, topic: str, partition: int, delete: bool) -> Any:
        return self._request(broker, 5, 4, controller_id=STUB_ID, controller_epoch=self.epoch,
                             broker_epoch=-1, topic_states=(build(
                                 sr.StopReplicaTopicState, topic_name=topic, partition_states=(
                                     build(sr.StopReplicaPartitionState, partition_index=partition,
                                           leader_epoch=-1, delete_partition=delete),)),))  # fmt: skip

    def apply(self, states: dict[str, dict[int, PartitionState]]) -> None:
        """UpdateMetadata to every running broker, then LeaderAndIsr to each replica; asserts
        every answer is NONE."""
        assert set(self.update_metadata(states).values()) == {0}
        hosts = {r for parts in states.values() for s in parts.values() for r in s.replicas}
        for i in sorted(hosts & set(self._running())):
            response = self.leader_and_isr(i, states)
            assert int(response.error_code) == 0
            assert {int(p.error_code) for t in response.topics for p in t.partition_errors} == {0}

    def _id(self, topic: str) -> uuid.UUID:
        return self.topic_ids.setdefault(topic, uuid.uuid4())

    def _running(self) -> list[int]:
        return [i for i, b in self.brokers.items() if b.pid is not None]

    def _request(self, broker: int, api_key: int, version: int, **fields: Any) -> Any:
        with RawConnection(self.brokers[broker].bootstrap) as conn:
            return conn.request(api_key, version, **fields)


class AlterPartitionStub:
    """Accepts every AlterPartition v3 and records the ISRs: (topic id, partition) -> ISR."""

    def __init__(self) -> None:
        self.isr: dict[tuple[uuid.UUID, int], list[int]] = {}
        self.requests = 0
        stub = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                sock: socket.socket = self.request
                while True:
                    head = _recv(sock, 4)
                    if head is None:
                        return
                    frame = _recv(sock, struct.unpack(">i", head)[0])
                    if frame is None:
                        return
                    header, request = decode_request(frame)
                    if header.api_key != 56:
                        return  # only AlterPartition is served here
                    sock.sendall(encode_response(56, header.api_version, header.correlation_id,
                                                 stub.answer(request, header.api_version)))

        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def answer(self, request: Any, version: int) -> Any:
        self.requests += 1
        cls = response_class(56, version)
        module = __import__(cls.__module__, fromlist=["x"])
        topics = []
        for topic in request.topics:
            parts = []
            for p in topic.partitions:
                isr = sorted(int(b.broker_id) for b in p.new_isr_with_epochs)
                self.isr[(topic.topic_id, int(p.partition_index))] = isr
                parts.append(build(module.PartitionData, partition_index=p.partition_index,
                                   error_code=0, leader_id=request.broker_id,
                                   leader_epoch=p.leader_epoch, isr=tuple(isr),
                                   leader_recovery_state=0,
                                   partition_epoch=int(p.partition_epoch) + 1))  # fmt: skip
            topics.append(build(module.TopicData, topic_id=topic.topic_id, partitions=tuple(parts)))
        return build(cls, throttle_time=0, error_code=0, topics=tuple(topics))

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _recv(sock: socket.socket, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data
