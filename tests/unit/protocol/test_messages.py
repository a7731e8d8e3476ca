import datetime

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

from strom.protocol.messages import (
    ProtocolError,
    RequestHeader,
    UnknownFieldError,
    UnsupportedVersionError,
    build,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    response_class,
    response_module,
)


def test_request_round_trip_flexible_header() -> None:
    req = MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=None, name="orders"),),
        allow_auto_topic_creation=True,
        include_topic_authorized_operations=False,
    )
    frame = encode_request(RequestHeader(3, 12, 77, "client-a"), req)
    header, decoded = decode_request(frame[4:])
    assert header == RequestHeader(3, 12, 77, "client-a")
    assert decoded == req


def test_api_versions_request_round_trip() -> None:
    req = ApiVersionsRequest(client_software_name="x", client_software_version="1")
    header, decoded = decode_request(encode_request(RequestHeader(18, 3, 1, None), req)[4:])
    assert header.client_id is None and decoded == req


def test_unknown_version_is_unsupported_not_a_crash() -> None:
    frame = b"\x00\x03\x00\x63\x00\x00\x00\x05" + b"\x00" * 4
    with pytest.raises(UnsupportedVersionError) as info:
        decode_request(frame)
    assert (info.value.api_key, info.value.api_version, info.value.correlation_id) == (3, 99, 5)


@pytest.mark.parametrize("garbage", [b"", b"\x00\x03", b"\x00\x03\x00\x0c\x00\x00\x00\x01\xff"])
def test_truncated_or_garbled_requests_raise_protocol_error(garbage: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_request(garbage)


def test_trailing_bytes_are_ignored_like_kafka_does() -> None:
    # librdkafka 2.16's Metadata v12 request for all topics, as captured: 3 bytes after the body
    frame = bytes.fromhex("0003000c00000003000772646b61666b610000000000010000")
    header, request = decode_request(frame)
    assert (header.api_key, header.api_version, header.client_id) == (3, 12, "rdkafka")
    assert request.topics is None


def test_build_drops_fields_a_version_lacks_and_coerces_wire_types() -> None:
    cls = response_class(2, 1)  # ListOffsets v1 has no leader_epoch, no throttle_time
    mod = response_module(2, 1)
    part = build(mod.ListOffsetsPartitionResponse, partition_index=0, error_code=3,
                 timestamp=-1, offset=5, leader_epoch=7)
    assert part.error_code is ErrorCode.unknown_topic_or_partition
    resp = build(cls, throttle_time=0, topics=(build(mod.ListOffsetsTopicResponse, name="t", partitions=(part,)),))
    _, decoded = decode_response(2, 1, encode_response(2, 1, 9, resp)[4:])
    assert decoded.topics[0].partitions[0].offset == 5


def test_build_refuses_a_field_no_version_has() -> None:
    mod = response_module(2, 1)
    for _ in range(2):  # before and after a legitimate drop taught the plan other versions
        with pytest.raises(UnknownFieldError, match="'ofset'"):  # a typo of "offset"
            build(mod.ListOffsetsPartitionResponse, partition_index=0, error_code=0,
                  timestamp=-1, ofset=5)
        part = build(mod.ListOffsetsPartitionResponse, partition_index=0, error_code=0,
                     timestamp=-1, offset=5, leader_epoch=7)  # leader_epoch: v4+
        assert part.offset == 5
    with pytest.raises(UnknownFieldError, match="'throttle_time_ms'"):  # kio's name: throttle_time
        build(response_class(2, 1), throttle_time_ms=0, topics=())


def test_build_drops_a_field_only_other_versions_have_at_every_version() -> None:
    # leader_epoch: ListOffsets v4+; throttle_time: v2+ (nested and top-level classes)
    for version in (1, 4, 7):
        mod = response_module(2, version)
        part = build(mod.ListOffsetsPartitionResponse, partition_index=0, error_code=0,
                     timestamp=-1, offset=5, leader_epoch=7)
        assert part.offset == 5
        assert getattr(part, "leader_epoch", 7) == 7
        resp = build(response_class(2, version), throttle_time=0, topics=())
        assert resp.topics == ()


def test_build_reports_missing_required_fields() -> None:
    with pytest.raises(TypeError, match="needs"):
        build(response_class(18, 3), error_code=0)


def test_api_versions_response_header_is_always_v0() -> None:
    cls = response_class(18, 3)
    mod = response_module(18, 3)
    resp = build(cls, error_code=0, throttle_time=datetime.timedelta(0),
                 api_keys=(build(mod.ApiVersion, api_key=0, min_version=0, max_version=9),))
    frame = encode_response(18, 3, 42, resp)
    # size, correlation id, then the body straight away (no tagged-field byte of a v1 header)
    assert frame[4:8] == (42).to_bytes(4, "big")
    assert frame[8:10] == b"\x00\x00"  # error code
    # default-valued tagged fields are left out: the body ends with an empty tag section
    assert frame.endswith(b"\x00\x00\x00\x00\x00")
