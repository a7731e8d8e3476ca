"""The connection core without a transport: bytes in, events out, responses in, bytes out.

A one-partition Produce (read without kio) and a two-partition one (decoded by kio) reach the
same Produce handler as the same request type, and that one handler, run on a real broker's
services, stores what both carry and answers both; other APIs, refusals and answers that need
no handler come out as their events."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import kio.schema.api_versions.v3.request as av
import pytest

from strom.broker import dispatch
from strom.broker.assembly import Broker
from strom.broker.connection import CloseConnection, ConnectionCore, Invalid, Request
from strom.broker.context import Client, RequestContext
from strom.config import BrokerConfig
from strom.protocol import record_batch as rb
from strom.protocol.errors import ErrorCode
from strom.protocol.hot_path import ProducePartition, ProduceResponse, produce_frame
from strom.protocol.messages import (
    RequestHeader,
    build,
    decode_request,
    decode_response,
    encode_request,
    request_class,
    request_module,
)
from strom.protocol.produce_request import ProduceRequest, from_kio
from strom.protocol.records import build_batch, decode_records
from strom.testing import free_port
from tests.integration.wire_bytes import TAGS, carr, cstr, frame


def produce(version: int, corr: int, parts: list[tuple[str, int, bytes]], acks: int = 1) -> bytes:
    """A Produce request frame (size prefix included), encoded by kio."""
    mod = request_module(0, version)
    topics: dict[str, list[tuple[int, bytes]]] = {}
    for topic, index, records in parts:
        topics.setdefault(topic, []).append((index, records))
    request = build(
        request_class(0, version), transactional_id=None, acks=acks, timeout=5000,
        topic_data=tuple(build(mod.TopicProduceData, name=name, partition_data=tuple(
            build(mod.PartitionProduceData, index=i, records=r) for i, r in ps))
            for name, ps in topics.items()),
    )  # fmt: skip
    return encode_request(RequestHeader(0, version, corr, "test"), request)


def batch(value: bytes) -> bytes:
    return build_batch([(None, value, [], 1_700_000_000_000)])


@pytest.fixture
def core() -> ConnectionCore:
    dispatch.load_handlers()
    return ConnectionCore(1 << 20)


def test_bytes_in_pieces_give_frames_once_complete(core: ConnectionCore) -> None:
    data = produce(9, 1, [("t", 0, batch(b"a"))]) + produce(9, 2, [("t", 0, batch(b"b"))])
    assert core.receive(data[:3]) == [] and core.receive(data[3:20]) == []
    frames = core.receive(data[20:])
    assert [f[4:8] for f in frames] == [(1).to_bytes(4, "big"), (2).to_bytes(4, "big")]


@pytest.mark.parametrize("version", [3, 9, 12])
def test_one_and_two_partition_produce_are_the_same_request_to_the_same_handler(
        core: ConnectionCore, version: int) -> None:  # fmt: skip
    one = produce(version, 7, [("t", 0, batch(b"a"))])[4:]
    two = produce(version, 8, [("t", 0, batch(b"b")), ("t", 1, batch(b"c"))])[4:]
    spec = dispatch.lookup(0)
    for data in (one, two):
        event = core.decode(data)
        assert isinstance(event, Request) and event.spec is spec
        assert isinstance(event.body, ProduceRequest)
        header, kio_request = decode_request(data)
        assert event.header == header and event.body == from_kio(kio_request)
    assert core.decode(two).body.topics == (("t", None, (0, 1)),)


def test_answers_without_a_handler_and_refusals(core: ConnectionCore) -> None:
    # ApiVersions at a version not served: v0 UNSUPPORTED_VERSION with the API list
    request = build(av.ApiVersionsRequest, client_software_name="t", client_software_version="1")
    answer = core.decode(encode_request(RequestHeader(18, 99, 5, "c"), request)[4:])
    assert isinstance(answer, bytes)
    correlation, response = decode_response(18, 0, answer[4:])
    assert correlation == 5 and response.error_code == ErrorCode.unsupported_version
    assert {k.api_key for k in response.api_keys} >= {0, 1, 3, 18}
    with pytest.raises(CloseConnection):  # an API nobody serves
        core.decode((9999).to_bytes(2, "big") + bytes(12))
    with pytest.raises(CloseConnection):  # Produce v2: message formats v0/v1 are not stored
        core.decode(b"\0\0\0\x02" + bytes(10))
    with pytest.raises(CloseConnection):  # shorter than a header
        core.decode(b"\0\0\0")


def test_a_forbidden_null_is_answered_invalid_request(core: ConnectionCore) -> None:
    data = frame(42, 2, 31, carr([cstr(None)]) + TAGS)  # DeleteGroups v2, a null group id
    event = core.decode(data[4:])
    assert isinstance(event, Invalid)
    answer = core.error_answer(event.header, event.body, ErrorCode.invalid_request, event.message)
    correlation, response = decode_response(42, 2, answer[4:])
    assert correlation == 31  # the same answer as on the wire: every result INVALID_REQUEST
    assert all(r.error_code == ErrorCode.invalid_request for r in response.results)
    assert "null" in event.message


def test_produce_answers_and_errors(core: ConnectionCore) -> None:
    header = RequestHeader(0, 9, 3, "c")
    ok = ProduceResponse([("t", [ProducePartition(0, 0, 41, -1, 0)])])
    assert core.encode(header, ok) == produce_frame(9, 3, ok)  # from the template
    request = ProduceRequest(None, 1, 1000, (("t", None, (0, 1)),), (b"x", b"y"))
    answer = core.error_answer(header, request, ErrorCode.not_leader_or_follower, "moved")
    _, response = decode_response(0, 9, answer[4:])
    assert [(p.index, p.error_code) for p in response.responses[0].partition_responses] == [
        (0, ErrorCode.not_leader_or_follower), (1, ErrorCode.not_leader_or_follower)]
    with pytest.raises(CloseConnection):  # acks=0 gets no answer: the connection closes
        core.error_answer(header, request._replace(acks=0), ErrorCode.corrupt_message, "bad")


def test_the_one_produce_handler_on_a_broker_without_a_transport(tmp_path: Path) -> None:
    """Decode, handle, encode, as the transport does, for a one-partition and a two-partition
    request: both answered with their offsets, every record stored once in order."""

    async def main() -> None:
        broker = Broker(BrokerConfig({"log.cleaner.enable": "false", "strom.admin.listener": ""}),
                        tmp_path / "data", ("127.0.0.1", free_port()))  # fmt: skip
        await broker.start()
        try:
            services = broker.services
            assert services is not None
            await services.topics.create("t", 2, 1, {})
            core = ConnectionCore(1 << 20)
            client = Client("127.0.0.1", 1, 1)
            answers: list[Any] = []
            mod = request_module(0, 9)
            # one partition of one topic, and a last topic with no partitions at all
            empty_last = encode_request(RequestHeader(0, 9, 4, "test"), build(
                request_class(0, 9), transactional_id=None, acks=1, timeout=5000, topic_data=(
                    build(mod.TopicProduceData, name="t", partition_data=(
                        build(mod.PartitionProduceData, index=1, records=batch(b"d")),)),
                    build(mod.TopicProduceData, name="u", partition_data=()))))  # fmt: skip
            for data in (produce(9, 1, [("t", 0, batch(b"a"))]),
                         produce(9, 2, [("t", 0, batch(b"b")), ("t", 1, batch(b"c"))]),
                         produce(9, 3, [("nope", 0, batch(b"x"))]), empty_last):  # fmt: skip
                event = core.decode(data[4:])
                assert isinstance(event, Request)
                response = event.spec.fn(RequestContext(event.header, services, client), event.body)
                answers.append(decode_response(0, 9, core.encode(event.header, response)[4:]))
            offsets = [[(p.index, p.error_code, p.base_offset) for t in r.responses
                        for p in t.partition_responses] for _c, r in answers]  # fmt: skip
            assert [c for c, _r in answers] == [1, 2, 3, 4]
            assert offsets == [[(0, 0, 0)], [(0, 0, 1), (1, 0, 0)],
                               [(0, ErrorCode.unknown_topic_or_partition, -1)], [(1, 0, 1)]]
            assert [t.name for t in answers[3][1].responses] == ["t", "u"]
            stored = {}
            for p in (0, 1):
                data = services.replicas.get_log("t", p).read(0, 1 << 20).records
                stored[p] = [r.value for _h, v in rb.iter_batches(data) for r in decode_records(v)]
            assert stored == {0: [b"a", b"b"], 1: [b"c", b"d"]}
        finally:
            await broker.stop()

    asyncio.run(main())
