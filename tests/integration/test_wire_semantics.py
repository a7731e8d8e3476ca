"""Fetch long-poll and limits, idempotent-producer dedupe and ListOffsets, on the wire."""

from __future__ import annotations

import datetime
import time

import pytest
from kio.schema.errors import ErrorCode

from strom.protocol.messages import build, request_class
from strom.protocol.record_batch import build_batch, iter_batches
from strom.testing.raw import RawConnection
from tests.integration.clients import create_topic, produce
from tests.integration.routing import any_broker, leader_of
from tests.integration.sockets import broker_side_queues, wait_until

pytestmark = pytest.mark.both_topologies  # [single] and [cluster3]: docs/cluster.md


def _mod(api: str, version: int):
    return __import__(f"kio.schema.{api}.v{version}.request", fromlist=["x"])


def fetch(conn: RawConnection, topic: str, partitions: dict[int, int], *, max_wait_ms: int = 0,
          min_bytes: int = 1, max_bytes: int = 1 << 20, partition_max_bytes: int = 1 << 20):
    mod = _mod("fetch", 12)
    return conn.request(
        1, 12, replica_id=-1, max_wait=datetime.timedelta(milliseconds=max_wait_ms),
        min_bytes=min_bytes, max_bytes=max_bytes, isolation_level=0, session_id=0,
        session_epoch=-1, rack_id="", forgotten_topics_data=(), cluster_id=None,
        topics=(build(mod.FetchTopic, topic=topic, partitions=tuple(
            build(mod.FetchPartition, partition=p, current_leader_epoch=-1, fetch_offset=o,
                  last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=partition_max_bytes)
            for p, o in partitions.items())),),
    )


def produce_raw(conn: RawConnection, topic: str, partition: int, records: bytes):
    mod = _mod("produce", 9)
    resp = conn.request(0, 9, transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=5),
                        topic_data=(build(mod.TopicProduceData, name=topic, partition_data=(
                            build(mod.PartitionProduceData, index=partition, records=records),)),))
    return resp.responses[0].partition_responses[0]


def test_long_poll_is_woken_by_an_append(broker, topic_name) -> None:
    import select

    from strom.protocol.messages import RequestHeader, decode_response, encode_request

    create_topic(broker.bootstrap, topic_name)
    mod = _mod("fetch", 12)
    request = build(
        request_class(1, 12), replica_id=-1, max_wait=datetime.timedelta(seconds=20), min_bytes=1,
        max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1, rack_id="",
        forgotten_topics_data=(), topics=(build(mod.FetchTopic, topic=topic_name, partitions=(
            build(mod.FetchPartition, partition=0, current_leader_epoch=-1, fetch_offset=0,
                  last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20),)),),
    )  # fmt: skip
    leader = leader_of(broker.bootstrap, topic_name)
    with RawConnection(leader, timeout=30) as conn:
        conn.sock.sendall(encode_request(RequestHeader(1, 12, 5, "raw"), request))
        start = time.monotonic()
        # parked: the broker has read the fetch and served another connection since
        wait_until(lambda: (q := broker_side_queues(conn.sock)) is not None and q[1] == 0,
                   10, "the broker to read the fetch")  # fmt: skip
        with RawConnection(leader) as other:
            other.request(18, 3, client_software_name="t", client_software_version="1")
        poller = select.poll()  # not select(): fds above 1024 in a long test session
        poller.register(conn.sock, select.POLLIN)
        assert poller.poll(0) == [], "answered before any data"
        produce(broker.bootstrap, topic_name, [{"value": b"wake up"}])
        correlation, resp = decode_response(1, 12, conn.recv_frame())
        waited = time.monotonic() - start
    assert correlation == 5
    part = resp.responses[0].partitions[0]
    assert part.error_code == ErrorCode.none and part.high_watermark == 1
    assert b"wake up" in part.records
    # woken by the append, far before the 20 s max wait
    assert waited < 15


def test_min_bytes_unmet_waits_for_max_wait_and_returns_what_there_is(broker, topic_name) -> None:
    create_topic(broker.bootstrap, topic_name)
    produce(broker.bootstrap, topic_name, [{"value": b"tiny"}])
    with RawConnection(leader_of(broker.bootstrap, topic_name)) as conn:
        start = time.monotonic()
        resp = fetch(conn, topic_name, {0: 0}, max_wait_ms=600, min_bytes=1 << 20)
        waited = time.monotonic() - start
    assert waited >= 0.5
    assert b"tiny" in resp.responses[0].partitions[0].records


def test_max_bytes_limits_but_always_returns_the_first_batch(broker, topic_name) -> None:
    create_topic(broker.bootstrap, topic_name, partitions=2, one_leader=True)
    with RawConnection(leader_of(broker.bootstrap, topic_name)) as conn:
        for p in (0, 1):
            for i in range(5):
                assert produce_raw(conn, topic_name, p, build_batch([(None, b"x" * 1000, [], i)])).error_code == 0
        resp = fetch(conn, topic_name, {0: 0, 1: 0}, max_bytes=10, partition_max_bytes=10)
    p0, p1 = resp.responses[0].partitions
    assert len(list(iter_batches(p0.records))) == 1  # above both limits, still one whole batch
    assert p1.records in (b"", None)  # the response is full
    assert p0.high_watermark == p1.high_watermark == 5


def test_fetch_from_mid_batch_offset_returns_the_containing_batch(broker, topic_name) -> None:
    create_topic(broker.bootstrap, topic_name)
    with RawConnection(leader_of(broker.bootstrap, topic_name)) as conn:
        produce_raw(conn, topic_name, 0, build_batch([(None, f"{i}".encode(), [], i) for i in range(10)]))
        resp = fetch(conn, topic_name, {0: 7})
    (header, _), = list(iter_batches(resp.responses[0].partitions[0].records))
    assert (header.base_offset, header.last_offset) == (0, 9)


def test_idempotent_retry_is_stored_once_and_answered_with_its_offset(broker, topic_name) -> None:
    create_topic(broker.bootstrap, topic_name)
    with RawConnection(leader_of(broker.bootstrap, topic_name)) as conn:
        init = conn.request(22, 4, transactional_id=None, transaction_timeout=60000,
                            producer_id=-1, producer_epoch=-1)
        assert init.error_code == ErrorCode.none and init.producer_id >= 0
        pid, epoch = init.producer_id, init.producer_epoch

        def batch(seq: int, n: int) -> bytes:
            return build_batch([(None, f"s{seq + i}".encode(), [], 1) for i in range(n)],
                               producer_id=pid, producer_epoch=epoch, base_sequence=seq)

        first = produce_raw(conn, topic_name, 0, batch(0, 3))
        second = produce_raw(conn, topic_name, 0, batch(3, 2))
        retry = produce_raw(conn, topic_name, 0, batch(0, 3))
        assert (first.error_code, first.base_offset) == (ErrorCode.none, 0)
        assert (second.error_code, second.base_offset) == (ErrorCode.none, 3)
        assert (retry.error_code, retry.base_offset) == (ErrorCode.none, 0)
        gap = produce_raw(conn, topic_name, 0, batch(9, 1))
        assert gap.error_code == ErrorCode.out_of_order_sequence_number
        resp = fetch(conn, topic_name, {0: 0})
    part = resp.responses[0].partitions[0]
    assert part.high_watermark == 5
    assert [h.base_offset for h, _ in iter_batches(part.records)] == [0, 3]


def test_list_offsets_earliest_latest_and_by_timestamp(broker, topic_name) -> None:
    create_topic(broker.bootstrap, topic_name)
    with RawConnection(leader_of(broker.bootstrap, topic_name)) as conn:
        for i in range(4):
            produce_raw(conn, topic_name, 0, build_batch([(None, b"v", [], 1000 * (i + 1))]))
        mod = _mod("list_offsets", 7)

        def lookup(ts: int):
            resp = conn.request(2, 7, replica_id=-1, isolation_level=0, topics=(build(
                mod.ListOffsetsTopic, name=topic_name, partitions=(build(
                    mod.ListOffsetsPartition, partition_index=0, current_leader_epoch=-1, timestamp=ts),)),))
            p = resp.topics[0].partitions[0]
            return p.error_code, p.offset, p.timestamp

        assert lookup(-2) == (ErrorCode.none, 0, -1)
        assert lookup(-1) == (ErrorCode.none, 4, -1)
        assert lookup(-3) == (ErrorCode.none, 3, 4000)
        assert lookup(2500) == (ErrorCode.none, 2, 3000)
        assert lookup(9999) == (ErrorCode.none, -1, -1)


def test_many_concurrent_connections_are_all_served_in_order(broker, topic_name) -> None:
    """300 connections at once, each pipelining 5 requests: every response arrives, in request
    order (correlation ids echoed), and a produced record is readable by all."""
    import socket
    import struct

    from strom.protocol.messages import RequestHeader, decode_response, encode_request

    create_topic(broker.bootstrap, topic_name)
    produce(broker.bootstrap, topic_name, [{"value": b"shared"}])
    host, _, port = any_broker(broker.bootstrap).rpartition(":")
    api_req = build(request_class(18, 3), client_software_name="t", client_software_version="1")
    socks = [socket.create_connection((host, int(port)), timeout=30) for _ in range(300)]
    try:
        for i, s in enumerate(socks):
            frames = b"".join(
                encode_request(RequestHeader(18, 3, i * 10 + k, "many"), api_req) for k in range(5)
            )
            s.sendall(frames)
        for i, s in enumerate(socks):
            buf = b""
            for k in range(5):
                while len(buf) < 4 or len(buf) < 4 + struct.unpack(">i", buf[:4])[0]:
                    chunk = s.recv(65536)
                    assert chunk, "connection closed"
                    buf += chunk
                size = struct.unpack(">i", buf[:4])[0]
                correlation, resp = decode_response(18, 3, buf[4 : 4 + size])
                buf = buf[4 + size :]
                assert correlation == i * 10 + k
                assert resp.error_code == ErrorCode.none
    finally:
        for s in socks:
            s.close()
    with RawConnection(leader_of(broker.bootstrap, topic_name)) as conn:
        assert b"shared" in fetch(conn, topic_name, {0: 0}).responses[0].partitions[0].records
