"""One broker holds 1,000 concurrent client connections and answers each in request order.

Every connection is open at the same time; each then pipelines ApiVersions, Produce, Metadata,
a long-polling Fetch and another Produce without waiting, and must get the five answers in
that order (correlation ids), with the Produce offsets in order. Everything produced is then
read back with confluent-kafka: exactly the 2,000 values sent, each connection's two in order.
"""

from __future__ import annotations

import asyncio
import datetime
import resource
import struct
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from kio.schema.errors import ErrorCode

from strom.protocol.messages import (
    RequestHeader,
    build,
    decode_response,
    encode_request,
    request_class,
)
from strom.protocol.record_batch import build_batch
from strom.testing import BrokerProcess
from tests.integration.clients import create_topic
from tests.integration.routing import leader_of

CONNECTIONS = 1000
PARTITIONS = 10
NEEDED_FDS = 2 * CONNECTIONS + 500  # our sockets, the broker's, and its logs and libraries


@pytest.fixture
def enough_fds() -> Iterator[None]:
    """Raise this process's soft open-file limit (the broker inherits it) up to the hard one:
    the test must not depend on a shell's ``ulimit -n``."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < NEEDED_FDS:
        pytest.skip(f"hard RLIMIT_NOFILE is {hard}, below the {NEEDED_FDS} this test needs")
    if soft != resource.RLIM_INFINITY and soft < NEEDED_FDS:
        resource.setrlimit(resource.RLIMIT_NOFILE, (NEEDED_FDS, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _request(api_key: int, version: int, corr: int, **fields: Any) -> bytes:
    req = build(request_class(api_key, version), **fields)
    return encode_request(RequestHeader(api_key, version, corr, f"conn-{corr >> 8}"), req)


def _mod(api: str, version: int) -> Any:
    return __import__(f"kio.schema.{api}.v{version}.request", fromlist=["x"])


def _produce(corr: int, topic: str, partition: int, value: bytes) -> bytes:
    mod = _mod("produce", 9)
    batch = build_batch([(None, value, [], 1_700_000_000_000)])
    return _request(0, 9, corr, transactional_id=None, acks=1,
                    timeout=datetime.timedelta(seconds=30),
                    topic_data=(build(mod.TopicProduceData, name=topic, partition_data=(
                        build(mod.PartitionProduceData, index=partition, records=batch),)),))  # fmt: skip


def _pipeline(conn: int, topic: str) -> list[tuple[int, int, int, bytes]]:
    """(api key, version, correlation id, frame) of one connection's requests, in order."""
    base = conn << 8
    partition = conn % PARTITIONS
    meta, fetch = _mod("metadata", 12), _mod("fetch", 12)
    reqs = [
        (18, 3, base + 1, _request(18, 3, base + 1, client_software_name="t",
                                   client_software_version="1")),  # fmt: skip
        (0, 9, base + 2, _produce(base + 2, topic, partition, f"{conn}-0".encode())),
        (3, 12, base + 3, _request(3, 12, base + 3, allow_auto_topic_creation=False,
                                   include_topic_authorized_operations=False,
                                   topics=(build(meta.MetadataRequestTopic, name=topic,
                                                 topic_id=uuid.UUID(int=0)),))),  # fmt: skip
        # waits its full max_wait (min_bytes cannot be met) while later requests queue behind
        (1, 12, base + 4, _request(
            1, 12, base + 4, replica_id=-1, max_wait=datetime.timedelta(milliseconds=300),
            min_bytes=1 << 30, max_bytes=1 << 20, isolation_level=0, session_id=0,
            session_epoch=-1, rack_id="", forgotten_topics_data=(), cluster_id=None,
            topics=(build(fetch.FetchTopic, topic=topic, partitions=(
                build(fetch.FetchPartition, partition=partition, current_leader_epoch=-1,
                      fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1,
                      partition_max_bytes=1 << 20),)),))),  # fmt: skip
        (0, 9, base + 5, _produce(base + 5, topic, partition, f"{conn}-1".encode())),
    ]
    return reqs


async def _run_clients(bootstrap: str, topic: str) -> dict[int, list[Any]]:
    host, _, port = bootstrap.rpartition(":")
    streams = []
    for _ in range(CONNECTIONS):  # all open at once before any request is sent
        streams.append(await asyncio.wait_for(asyncio.open_connection(host, int(port)), 30))

    async def one(conn: int) -> list[Any]:
        reader, writer = streams[conn]
        reqs = _pipeline(conn, topic)
        writer.write(b"".join(frame for *_, frame in reqs))
        await writer.drain()
        answers = []
        for api_key, version, corr, _frame in reqs:
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            got_corr, response = decode_response(api_key, version, await reader.readexactly(size))
            assert got_corr == corr, f"connection {conn}: answer {got_corr} where {corr} was due"
            answers.append(response)
        return answers

    try:
        results = await asyncio.wait_for(asyncio.gather(*(one(c) for c in range(CONNECTIONS))),
                                         120)  # fmt: skip
    finally:
        for _reader, writer in streams:
            writer.close()
    return dict(enumerate(results))


def _read_back(bootstrap: str, topic: str, expected: int) -> dict[int, list[tuple[int, bytes]]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                         "enable.auto.commit": False})  # fmt: skip
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
    n = 0
    try:
        deadline = time.monotonic() + 60
        while n < expected and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=expected - n, timeout=1.0):
                assert not msg.error(), msg.error()
                got[msg.partition()].append((msg.offset(), msg.value()))
                n += 1
    finally:
        consumer.close()
    return got


@pytest.mark.slow
def test_a_thousand_connections_each_answered_in_order(tmp_path: Path, enough_fds: None) -> None:
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    try:
        topic = "many-connections"
        create_topic(broker.bootstrap, topic, partitions=PARTITIONS)
        answers = asyncio.run(_run_clients(broker.bootstrap, topic))
        offsets: dict[int, tuple[int, int]] = {}
        for conn, (versions, first, meta, fetch, second) in answers.items():
            assert versions.error_code == ErrorCode.none
            parts = [first.responses[0].partition_responses[0],
                     second.responses[0].partition_responses[0]]  # fmt: skip
            assert [p.error_code for p in parts] == [ErrorCode.none, ErrorCode.none]
            assert [p.index for p in parts] == [conn % PARTITIONS] * 2
            assert parts[0].base_offset < parts[1].base_offset, f"connection {conn}"
            offsets[conn] = (int(parts[0].base_offset), int(parts[1].base_offset))
            assert [t.name for t in meta.topics] == [topic]
            assert len(meta.topics[0].partitions) == PARTITIONS
            fetched = fetch.responses[0].partitions[0]
            assert fetched.error_code == ErrorCode.none and fetched.partition_index == conn % PARTITIONS
        got = _read_back(broker.bootstrap, topic, 2 * CONNECTIONS)
        expected = {p: {} for p in range(PARTITIONS)}  # partition -> offset -> value
        for conn, (a, b) in offsets.items():
            expected[conn % PARTITIONS][a] = f"{conn}-0".encode()
            expected[conn % PARTITIONS][b] = f"{conn}-1".encode()
        assert {p: dict(msgs) for p, msgs in got.items()} == expected
        assert sum(len(m) for m in got.values()) == 2 * CONNECTIONS
    finally:
        broker.stop()


def test_a_waiting_fetch_does_not_hold_back_the_answers_before_it(broker, topic_name) -> None:
    """Responses are coalesced per connection; one that is ready must still leave before a
    long-polling Fetch pipelined after it starts waiting."""
    import socket

    create_topic(broker.bootstrap, topic_name, partitions=PARTITIONS, one_leader=True)
    reqs = _pipeline(3, topic_name)
    produce, fetch = reqs[1], reqs[3]
    host, _, port = leader_of(broker.bootstrap, topic_name).rpartition(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:

        def recv_exact(n: int) -> bytes:  # a timeout makes the socket non-blocking: no WAITALL
            data = bytearray()
            while len(data) < n:
                chunk = sock.recv(n - len(data))
                assert chunk, "the broker closed the connection"
                data += chunk
            return bytes(data)

        sock.sendall(produce[3] + fetch[3])
        start = time.monotonic()
        (size,) = struct.unpack(">i", recv_exact(4))
        corr, response = decode_response(0, 9, recv_exact(size))
        first = time.monotonic() - start
        (size,) = struct.unpack(">i", recv_exact(4))
        corr2, _ = decode_response(1, 12, recv_exact(size))
        second = time.monotonic() - start
    assert (corr, corr2) == (produce[2], fetch[2])
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.none
    # the Fetch waits its 300 ms max_wait; the Produce answer must not
    assert second >= 0.25
    assert first < second - 0.15, (first, second)
