"""The pre-decode walk agrees with kio's encoder on every request class, refuses every length
beyond the frame, and reports forbidden nulls; error responses encode for every served API."""

from __future__ import annotations

import random

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map

from strom.broker import dispatch
from strom.protocol.error_response import error_response
from strom.protocol.messages import (
    InvalidRequestError,
    ProtocolError,
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    request_class,
    response_class,
)
from strom.protocol.request_check import MalformedRequestError, check_body, check_header
from strom.testing.samples import sample
from tests.integration.wire_bytes import carr, cstr, frame, uvarint

ALL_REQUESTS = [
    (key, version)
    for key, name in sorted(api_key_map.items())
    for version in sorted(schema_name_map[name])
]


def _request_classes():
    for key, version in ALL_REQUESTS:
        try:
            yield key, version, request_class(key, version)
        except Exception:  # a version with a response schema only
            continue


@pytest.mark.parametrize("seed", range(3))
def test_walk_ends_exactly_where_kio_encoding_ends(seed) -> None:
    rng = random.Random(seed)
    checked = 0
    for key, version, cls in _request_classes():
        req = sample(cls, rng)
        data = encode_request(RequestHeader(key, version, 1, "c"), req)[4:]
        pos = check_header(data, bool(cls.__flexible__))
        assert check_body(cls, data, pos) == [], (key, version)
        # and every strict prefix of the body is refused: nothing is read past the end
        for cut in sorted({pos, (pos + len(data)) // 2, len(data) - 1}):
            if cut < len(data):
                with pytest.raises(MalformedRequestError):
                    check_body(cls, data[:cut], pos)
        checked += 1
    assert checked > 250


def test_the_issue_reproducer_is_malformed_not_an_abort() -> None:
    data = bytes.fromhex("000000100003000c00000001ffff00ffffffff0f")[4:]
    with pytest.raises(ProtocolError, match="4294967294 items"):
        decode_request(data)


@pytest.mark.parametrize("huge", [uvarint(2**31), uvarint(0xFFFFFFFF)])
def test_huge_counts_are_refused_for_primitive_and_struct_arrays(huge) -> None:
    # DescribeProducers v0: topics [ name, partition_indexes [int32] ]
    body = carr([cstr("t") + huge])
    with pytest.raises(ProtocolError):
        decode_request(frame(61, 0, 1, body + b"\x00")[4:])
    with pytest.raises(ProtocolError):
        decode_request(frame(61, 0, 1, huge)[4:])


def test_varint_longer_than_five_bytes_is_malformed() -> None:
    with pytest.raises(ProtocolError):
        decode_request(frame(15, 5, 1, b"\xff" * 8)[4:])


def test_forbidden_null_is_reported_with_what_was_decoded() -> None:
    body = b"\x00" + b"\x00"  # DeleteGroups v2: groups_names null, no tags
    with pytest.raises(InvalidRequestError) as info:
        decode_request(frame(42, 2, 9, body)[4:])
    assert info.value.null_fields == ["DeleteGroupsRequest.groups_names"]
    assert info.value.header.correlation_id == 9


def test_allowed_null_passes() -> None:
    # Metadata v12: topics null means all topics (nullable in Kafka's schema)
    header, req = decode_request(frame(3, 12, 1, b"\x00" + b"\x01\x00" + b"\x00")[4:])
    assert req.topics is None


def test_error_response_encodes_for_every_served_api_and_version() -> None:
    rng = random.Random(7)
    for spec in dispatch.load_handlers().values():
        for version in range(spec.min_version, spec.max_version + 1):
            req = sample(request_class(spec.api_key, version), rng)
            cls = response_class(spec.api_key, version)
            resp = error_response(cls, req, ErrorCode.invalid_request, "bad")
            data = encode_response(spec.api_key, version, 5, resp)
            correlation, decoded = decode_response(spec.api_key, version, data[4:])
            assert correlation == 5
            assert decoded == resp


def test_error_response_mirrors_topics_and_partitions() -> None:
    from kio.schema.produce.v9 import request as produce

    req = produce.ProduceRequest(
        transactional_id=None, acks=1, timeout=__import__("datetime").timedelta(seconds=1),
        topic_data=(produce.TopicProduceData(name="a", partition_data=(
            produce.PartitionProduceData(index=3, records=None),
            produce.PartitionProduceData(index=5, records=None),
        )),),
    )  # fmt: skip
    resp = error_response(response_class(0, 9), req, ErrorCode.invalid_request, "x")
    (topic,) = resp.responses
    assert topic.name == "a"
    assert [(p.index, p.error_code, p.base_offset) for p in topic.partition_responses] == [
        (3, ErrorCode.invalid_request, -1),
        (5, ErrorCode.invalid_request, -1),
    ]
