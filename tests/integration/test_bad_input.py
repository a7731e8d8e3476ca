"""Bad input gets Kafka's error code or closes only that connection; everyone else is served
and nothing stored is lost."""

from __future__ import annotations

import datetime
import struct

import pytest
from kio.schema.errors import ErrorCode

from strom.protocol.messages import RequestHeader, build, encode_request, request_class
from strom.protocol.record_batch import build_batch
from strom.testing.raw import RawConnection
from tests.integration.clients import consume_all, create_topic, produce
from tests.integration.routing import leader_of


@pytest.fixture
def seeded(broker, topic_name):
    """A topic with 20 acknowledged messages that every test checks afterwards."""
    create_topic(broker.bootstrap, topic_name, config={"max.message.bytes": "2000"})
    produce(broker.bootstrap, topic_name, [{"value": f"keep-{i}".encode()} for i in range(20)])
    yield topic_name
    got = consume_all(broker.bootstrap, topic_name, [0], expected=20)
    assert [m.value() for m in got] == [f"keep-{i}".encode() for i in range(20)]


def produce_raw(conn: RawConnection, topic: str, records: bytes, version: int = 7):
    mod = __import__(f"kio.schema.produce.v{version}.request", fromlist=["x"])
    return conn.request(
        0, version, transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=5),
        topic_data=(build(mod.TopicProduceData, name=topic,
                          partition_data=(build(mod.PartitionProduceData, index=0, records=records),)),),
    )


def one_partition(response):
    (topic,) = response.responses
    (part,) = topic.partition_responses
    return part


def test_bad_crc_is_corrupt_message_and_not_stored(broker, seeded) -> None:
    batch = bytearray(build_batch([(b"k", b"evil", [], 1_700_000_000_000)]))
    batch[-1] ^= 0xFF
    with RawConnection(leader_of(broker.bootstrap, seeded)) as conn:
        part = one_partition(produce_raw(conn, seeded, bytes(batch)))
        assert part.error_code == ErrorCode.corrupt_message
        # the same connection is still served
        resp = conn.request(18, 3, client_software_name="t", client_software_version="1")
        assert resp.error_code == ErrorCode.none


def test_truncated_batch_is_corrupt_message(broker, seeded) -> None:
    batch = build_batch([(b"k", b"v" * 100, [], 1)])
    with RawConnection(leader_of(broker.bootstrap, seeded)) as conn:
        part = one_partition(produce_raw(conn, seeded, batch[:-10]))
        assert part.error_code == ErrorCode.corrupt_message


def test_too_large_message_is_message_too_large(broker, seeded) -> None:
    with RawConnection(leader_of(broker.bootstrap, seeded)) as conn:
        part = one_partition(produce_raw(conn, seeded, build_batch([(None, b"x" * 5000, [], 1)])))
        assert part.error_code == ErrorCode.message_too_large


def test_unknown_topic_and_invalid_topic_name(broker, seeded) -> None:
    with RawConnection(leader_of(broker.bootstrap, seeded)) as conn:
        part = one_partition(produce_raw(conn, "no-such-topic-xyz", build_batch([(None, b"x", [], 1)])))
        assert part.error_code == ErrorCode.unknown_topic_or_partition
        mod = __import__("kio.schema.metadata.v12.request", fromlist=["x"])
        meta = conn.request(3, 12, topics=(build(mod.MetadataRequestTopic, topic_id=None, name="bad name!"),),
                            allow_auto_topic_creation=True, include_topic_authorized_operations=False)
        assert [t.error_code for t in meta.topics] == [ErrorCode.invalid_topic_exception]


def test_fetch_out_of_range_offset(broker, seeded) -> None:
    mod = __import__("kio.schema.fetch.v11.request", fromlist=["x"])
    with RawConnection(leader_of(broker.bootstrap, seeded)) as conn:
        resp = conn.request(
            1, 11, replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=1 << 20,
            isolation_level=0, session_id=0, session_epoch=-1, rack_id="", forgotten_topics_data=(),
            topics=(build(mod.FetchTopic, topic=seeded, partitions=(build(
                mod.FetchPartition, partition=0, current_leader_epoch=-1, fetch_offset=1000,
                log_start_offset=-1, partition_max_bytes=1 << 20),)),),
        )
        part = resp.responses[0].partitions[0]
        assert part.error_code == ErrorCode.offset_out_of_range
        assert part.high_watermark == 20


def test_unsupported_api_versions_version_gets_v0_answer(broker, seeded) -> None:
    with RawConnection(leader_of(broker.bootstrap, seeded)) as conn:
        # ApiVersions v99: header v1-style prefix, empty body
        body = struct.pack(">hhih", 18, 99, 7, -1)
        conn.send_bytes(struct.pack(">i", len(body)) + body)
        frame = conn.recv_frame()
        correlation, error_code, count = struct.unpack_from(">ihi", frame, 0)
        assert (correlation, error_code) == (7, ErrorCode.unsupported_version)
        keys = {struct.unpack_from(">h", frame, 10 + 6 * i)[0] for i in range(count)}
        assert {0, 1, 2, 3, 18} <= keys


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(struct.pack(">i", 2**31 - 1) + b"\x00" * 16, id="huge-size"),
        pytest.param(struct.pack(">i", -5), id="negative-size"),
        pytest.param(struct.pack(">i", 12) + b"\xde\xad\xbe\xef" * 3, id="garbage"),
        pytest.param(struct.pack(">i", 8) + struct.pack(">hhi", 999, 0, 1), id="unknown-api-key"),
        pytest.param(struct.pack(">i", 30) + struct.pack(">hhi", 3, 12, 1) + b"\x00\x05abc", id="truncated-body"),
    ],
)
def test_garbage_closes_only_that_connection(broker, seeded, payload) -> None:
    with RawConnection(leader_of(broker.bootstrap, seeded)) as bystander, RawConnection(leader_of(broker.bootstrap, seeded)) as bad:
        bad.send_bytes(payload)
        if payload.startswith(struct.pack(">i", 30)):
            bad.sock.shutdown(1)  # a frame cut off mid-way by the peer
        assert bad.is_closed_by_peer()
        resp = bystander.request(18, 3, client_software_name="t", client_software_version="1")
        assert resp.error_code == ErrorCode.none


def test_produce_v2_is_refused_but_advertised_from_v0(broker, seeded) -> None:
    with RawConnection(leader_of(broker.bootstrap, seeded)) as conn:
        resp = conn.request(18, 3, client_software_name="t", client_software_version="1")
        produce_api = next(k for k in resp.api_keys if k.api_key == 0)
        assert produce_api.min_version == 0
        body = struct.pack(">hhih", 0, 2, 1, -1) + b"\x00\x01\x00\x00\x13\x88\x00\x00\x00\x00"
        conn.send_bytes(struct.pack(">i", len(body)) + body)
        assert conn.is_closed_by_peer()


def test_invalid_required_acks(broker, seeded) -> None:
    mod = __import__("kio.schema.produce.v7.request", fromlist=["x"])
    with RawConnection(leader_of(broker.bootstrap, seeded)) as conn:
        resp = conn.request(0, 7, transactional_id=None, acks=5, timeout=datetime.timedelta(seconds=1),
                            topic_data=(build(mod.TopicProduceData, name=seeded, partition_data=(
                                build(mod.PartitionProduceData, index=0, records=build_batch([(None, b"x", [], 1)])),)),))
        assert one_partition(resp).error_code == ErrorCode.invalid_required_acks


def test_encode_request_helper_matches_header_layout() -> None:
    req = build(request_class(18, 0))
    frame = encode_request(RequestHeader(18, 0, 3, "c"), req)
    assert frame[4:12] == struct.pack(">hhi", 18, 0, 3)
