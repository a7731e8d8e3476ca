"""Requests that lie about lengths or carry nulls the schema forbids, against a real broker.

A declared length beyond the frame closes only that connection (it used to abort the whole
process inside kio's native reader); a null where Kafka's schema allows none is answered with
INVALID_REQUEST, mirroring what was asked, and the connection stays open. Either way the
broker keeps serving everyone, logs one line and no traceback, and loses nothing stored.
"""

from __future__ import annotations

import struct

import pytest
from kio.schema.errors import ErrorCode

from strom.protocol.messages import decode_response
from strom.testing.raw import RawConnection
from tests.integration.clients import consume_all, create_topic, produce
from tests.integration.routing import leader_of, process_at, processes
from tests.integration.wire_bytes import TAGS, carr, cstr, frame, larr, lstr, uvarint

HUGE = uvarint(0xFFFFFFFF)  # a compact array claiming 4,294,967,294 elements


@pytest.fixture
def seeded(broker, topic_name):
    """20 acknowledged messages, read back byte-identical after each test."""
    create_topic(broker.bootstrap, topic_name)
    produce(broker.bootstrap, topic_name, [{"value": f"keep-{i}".encode()} for i in range(20)])
    yield topic_name
    got = consume_all(broker.bootstrap, topic_name, [0], expected=20)
    assert [m.value() for m in got] == [f"keep-{i}".encode() for i in range(20)]
    for proc in processes(broker):
        assert proc.pid is not None and proc.wait(0) is None, f"broker {proc.bootstrap} died"
        assert "Traceback" not in proc.log_file.read_text(errors="replace")


def assert_alive(bootstrap: str) -> None:
    with RawConnection(bootstrap) as conn:
        resp = conn.request(18, 3, client_software_name="t", client_software_version="1")
        assert resp.error_code == ErrorCode.none


# Each: the first array of the body claims 2**32 - 2 elements with no bytes behind it.
LYING_LENGTHS = {
    "metadata-v12": bytes.fromhex("000000100003000c00000001ffff00ffffffff0f"),  # the issue's
    "find-coordinator-v4": frame(10, 4, 1, b"\x00" + HUGE),
    "describe-groups-v5": frame(15, 5, 1, HUGE),
    "delete-topics-v5": frame(20, 5, 1, HUGE),
    "delete-records-v2": frame(21, 2, 1, HUGE),
    # nested: one topic whose partitions array lies
    "produce-v9-nested": frame(0, 9, 1, cstr(None) + struct.pack(">hi", 1, 1000) + carr([cstr("t") + HUGE])),
    # legacy int32 lengths
    "metadata-v1-legacy-array": frame(3, 1, 1, struct.pack(">i", 0x7FFFFFFF), flexible=False),
    "metadata-v4-legacy-string": frame(3, 4, 1, struct.pack(">ih", 1, 0x7FFF) + b"ab", flexible=False),
    # a tagged field whose size runs past the frame
    "api-versions-v3-tagged": frame(18, 3, 1, cstr("t") + cstr("1") + b"\x01\x00" + uvarint(10_000)),
    # an API strom does not serve (DescribeProducers): refused before a byte is decoded
    "unserved-describe-producers-v0": frame(61, 0, 1, HUGE),
}


@pytest.mark.parametrize("payload", list(LYING_LENGTHS.values()), ids=list(LYING_LENGTHS))
def test_a_length_beyond_the_frame_closes_only_that_connection(broker, seeded, payload) -> None:
    with RawConnection(leader_of(broker.bootstrap, seeded)) as bad:
        bad.send_bytes(payload)
        assert bad.is_closed_by_peer()
    assert_alive(leader_of(broker.bootstrap, seeded))


def request_raw(conn: RawConnection, api_key: int, version: int, body: bytes, flexible: bool = True):
    conn.send_bytes(frame(api_key, version, 77, body, flexible))
    correlation, response = decode_response(api_key, version, conn.recv_frame())
    assert correlation == 77
    return response


def answered_invalid(broker, api_key: int, version: int) -> bool:
    lines = broker.log_file.read_text(errors="replace").splitlines()
    return any(f"api key {api_key} v{version}: null" in line and "answering INVALID_REQUEST" in line
               for line in lines)


def test_null_partitions_in_fetch_is_invalid_request(broker, seeded) -> None:
    fixed = struct.pack(">iiiibii", -1, 100, 1, 1 << 20, 0, 0, -1)
    body = fixed + carr([cstr(seeded) + b"\x00" + TAGS]) + carr([]) + cstr("") + TAGS
    with RawConnection(leader_of(broker.bootstrap, seeded)) as conn:
        resp = request_raw(conn, 1, 12, body)
        assert resp.error_code == ErrorCode.invalid_request
        assert [t.topic for t in resp.responses] == [seeded]
        assert resp.responses[0].partitions == ()
        # the connection is still served
        assert conn.request(18, 3, client_software_name="t", client_software_version="1").error_code == 0


def test_null_configs_in_create_topics_is_invalid_request(broker, seeded) -> None:
    topic = cstr(seeded + "-new") + struct.pack(">ih", 1, 1) + carr([]) + b"\x00" + TAGS
    body = carr([topic]) + struct.pack(">i?", 5000, False) + TAGS
    with RawConnection(leader_of(broker.bootstrap, seeded)) as conn:
        resp = request_raw(conn, 19, 7, body)
    assert [(t.name, t.error_code) for t in resp.topics] == [(seeded + "-new", ErrorCode.invalid_request)]
    with RawConnection(leader_of(broker.bootstrap, seeded)) as conn:  # and the topic was not created
        meta = conn.request(3, 12, topics=None, allow_auto_topic_creation=False,
                            include_topic_authorized_operations=False)
        assert seeded + "-new" not in {t.name for t in meta.topics}


def test_null_config_list_in_alter_configs_is_invalid_request(broker, seeded) -> None:
    resource = struct.pack(">b", 2) + cstr(seeded) + b"\x00" + TAGS
    with RawConnection(leader_of(broker.bootstrap, seeded)) as conn:
        resp = request_raw(conn, 33, 2, carr([resource]) + b"\x00" + TAGS)
        assert [(r.resource_name, r.error_code) for r in resp.responses] == [
            (seeded, ErrorCode.invalid_request)
        ]
        inc = struct.pack(">b", 2) + cstr(seeded) + b"\x00" + TAGS
        resp = request_raw(conn, 44, 1, carr([inc]) + b"\x00" + TAGS)
        assert [(r.resource_name, r.error_code) for r in resp.responses] == [
            (seeded, ErrorCode.invalid_request)
        ]
        resp = request_raw(conn, 32, 4, b"\x00" + b"\x00\x00" + TAGS)  # resources null
        assert resp.results == ()


@pytest.mark.parametrize(
    ("api_key", "version", "body", "flexible"),
    [
        pytest.param(42, 2, b"\x00" + TAGS, True, id="delete-groups-null-names"),
        pytest.param(42, 1, larr(None), False, id="delete-groups-v1-null-names"),
        pytest.param(15, 5, b"\x00\x00" + TAGS, True, id="describe-groups-null-groups"),
        pytest.param(15, 5, carr([cstr(None)]) + b"\x00" + TAGS, True, id="describe-groups-null-name"),
        pytest.param(2, 7, struct.pack(">ib", -1, 0) + b"\x00" + TAGS, True, id="list-offsets-null-topics"),
        pytest.param(10, 4, b"\x00" + carr([cstr(None)]) + TAGS, True, id="find-coordinator-null-key"),
        pytest.param(20, 5, carr([cstr(None)]) + struct.pack(">i", 1000) + TAGS, True, id="delete-topics-null-name"),
        pytest.param(21, 2, b"\x00" + struct.pack(">i", 1000) + TAGS, True, id="delete-records-null-topics"),
        pytest.param(32, 1, larr([struct.pack(">b", 2) + lstr(None) + larr(None)]) + b"\x00", False,
                     id="describe-configs-null-resource-name"),
    ],
)
def test_null_where_the_schema_forbids_it_is_answered_not_dropped(
    broker, seeded, api_key, version, body, flexible
) -> None:
    with RawConnection(leader_of(broker.bootstrap, seeded)) as conn:
        resp = request_raw(conn, api_key, version, body, flexible)
        for name in ("error_code",):
            if hasattr(resp, name):
                assert getattr(resp, name) == ErrorCode.invalid_request
        # every per-item error in the answer is INVALID_REQUEST
        codes = [
            item.error_code
            for arr in (getattr(resp, f, ()) for f in ("results", "groups", "topics", "coordinators", "responses"))
            for item in (arr or ())
            if hasattr(item, "error_code")
        ]
        assert all(code == ErrorCode.invalid_request for code in codes), codes
        assert conn.request(18, 3, client_software_name="t", client_software_version="1").error_code == 0
    assert answered_invalid(process_at(broker, leader_of(broker.bootstrap, seeded)), api_key, version)


def test_produce_with_null_partitions_is_answered_with_the_topic(broker, seeded) -> None:
    body = cstr(None) + struct.pack(">hi", 1, 1000) + carr([cstr(seeded) + b"\x00" + TAGS]) + TAGS
    with RawConnection(leader_of(broker.bootstrap, seeded)) as conn:
        resp = request_raw(conn, 0, 9, body)
        assert [(t.name, t.partition_responses) for t in resp.responses] == [(seeded, ())]
    assert answered_invalid(process_at(broker, leader_of(broker.bootstrap, seeded)), 0, 9)


def test_acks_zero_produce_with_a_null_closes_the_connection(broker, seeded) -> None:
    body = cstr(None) + struct.pack(">hi", 0, 1000) + carr([cstr(seeded) + b"\x00" + TAGS]) + TAGS
    with RawConnection(leader_of(broker.bootstrap, seeded)) as conn:
        conn.send_bytes(frame(0, 9, 5, body))
        assert conn.is_closed_by_peer()


@pytest.mark.parametrize("version", [10, 11])
def test_metadata_by_topic_id_before_v12_is_invalid_request(broker, seeded, version) -> None:
    """Found by the fuzz test: a null name (with a topic id) before v12 made the handler copy
    the null into a response field that is not nullable in those versions."""
    import uuid

    from strom.protocol.messages import build, request_class

    mod = __import__(f"kio.schema.metadata.v{version}.request", fromlist=["x"])
    req = dict(
        topics=(build(mod.MetadataRequestTopic, topic_id=uuid.uuid4(), name=None),),
        allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )  # fmt: skip
    assert build(request_class(3, version), **req)
    with RawConnection(leader_of(broker.bootstrap, seeded)) as conn:
        resp = conn.request(3, version, **req)
        assert [(t.name, t.error_code) for t in resp.topics] == [("", ErrorCode.invalid_request)]
        assert conn.request(18, 3, client_software_name="t", client_software_version="1").error_code == 0
    log = process_at(broker, leader_of(broker.bootstrap, seeded)).log_file.read_text(errors="replace")
    assert f"api key 3 v{version}: INVALID_REQUEST: topic name can not be null" in log
