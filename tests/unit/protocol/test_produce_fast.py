"""The single-partition Produce reader reads what kio reads (the same header, the same
ProduceRequest as kio's decode converted by from_kio), for every version it claims (3-12),
refuses (None) every other shape without raising, and its response templates write the bytes
of the general encoder (byte-compared with kio in test_hot_path), which kio decodes back to the
same response."""

from __future__ import annotations

import itertools
import random

import pytest

from strom.protocol import hot_path as hp
from strom.protocol import produce_fast as pf
from strom.protocol.messages import (
    RequestHeader,
    build,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    request_class,
    request_module,
    response_class,
    response_module,
)
from strom.protocol.produce_request import ProduceRequest, from_kio

PRODUCE = 0
CLIENT_IDS = [None, "", "rdkafka", "clïent-" + "x" * 300]
TXN_IDS = [None, "", "txn-é"]
TOPICS = ["t", "topic-é-ü", "x" * 200]  # 200 bytes: a two-byte compact length


def _frame(version: int, *, client_id: str | None = "rdkafka", txn: str | None = None,
           acks: int = 1, timeout: int = 30000, topics: list[tuple[str, list[tuple[int, bytes | None]]]]
           | None = None, correlation: int = 7) -> bytes:  # fmt: skip
    """A Produce request encoded by kio, without its size prefix."""
    mod = request_module(PRODUCE, version)
    topics = [("t", [(0, b"r" * 170)])] if topics is None else topics
    request = build(
        request_class(PRODUCE, version), transactional_id=txn, acks=acks, timeout=timeout,
        topic_data=tuple(build(mod.TopicProduceData, name=name, partition_data=tuple(
            build(mod.PartitionProduceData, index=i, records=r) for i, r in parts))
            for name, parts in topics),
    )  # fmt: skip
    return encode_request(RequestHeader(PRODUCE, version, correlation, client_id), request)[4:]


def _expected(frame: bytes) -> tuple[RequestHeader, ProduceRequest]:
    header, request = decode_request(frame)
    converted = from_kio(request)
    (topic,) = converted.topics
    assert len(topic[2]) == 1 and topic[1] is None and len(converted.records) == 1
    return header, converted


def _cases(version: int) -> list[bytes]:
    rnd = random.Random(version)
    frames = []
    for client_id, txn, topic in itertools.product(CLIENT_IDS, TXN_IDS, TOPICS):
        records = rnd.choice([b"", b"r" * 61, b"r" * 170, bytes(rnd.getrandbits(8) for _ in range(20_000))])
        frames.append(_frame(version, client_id=client_id, txn=txn, acks=rnd.choice([0, 1, -1, 5]),
                             timeout=rnd.choice([0, 1500, 2**31 - 1]),
                             topics=[(topic, [(rnd.choice([0, 7, 2**31 - 1]), records)])],
                             correlation=rnd.randrange(-(2**31), 2**31)))  # fmt: skip
    return frames


@pytest.mark.parametrize("version", pf.VERSIONS)
def test_single_partition_requests_read_as_kio_reads_them(version: int) -> None:
    for frame in _cases(version):
        assert pf.parse_single(frame) == _expected(frame)


@pytest.mark.parametrize("version", pf.VERSIONS)
def test_reader_reuses_the_layout_only_for_the_same_bytes(version: int) -> None:
    """A connection's reader, fed requests whose fixed part repeats or changes, reads each one
    exactly as kio does."""
    reader = pf.SingleProduceReader()
    rnd = random.Random(100 + version)
    frames = _cases(version)
    sequence = [rnd.choice(frames[:3]) for _ in range(30)] + frames
    for i, frame in enumerate(sequence):
        frame = frame[:4] + (i * 7919).to_bytes(4, "big", signed=False) + frame[8:]
        assert reader.read(frame) == _expected(frame)


@pytest.mark.parametrize("version", pf.VERSIONS)
def test_reader_keeps_the_layout_across_partitions(version: int) -> None:
    """A producer writing round-robin over many partitions of one topic: each request is read
    as kio reads it, and only the first is parsed the long way (the partition index is read,
    not part of the remembered layout)."""
    reader = pf.SingleProduceReader()
    partitions = [0, 1, 9_999, 2**31 - 1, 255, 256, 7, 0]
    for i, partition in enumerate(partitions * 3):
        records = b"r" * (170 + i)  # lengths crossing a varint byte boundary too
        frame = _frame(version, topics=[("t", [(partition, records)])], correlation=i)
        assert reader.read(frame) == _expected(frame)
    assert reader.parses == 1
    other = _frame(version, topics=[("u", [(3, b"r" * 170)])])  # another topic: a new layout
    assert reader.read(other) == _expected(other)
    assert reader.parses == 2
    short = _frame(version, topics=[("u", [(3, b"r" * 170)])])
    # the records' length (uvarint 171 or int32), the records, the tags (flexible): cut two
    # bytes into the partition index before them
    cut = len(short) - 170 - (2 + 3 + 2 if version >= 9 else 4 + 2)
    assert short[cut - 2 : cut + 2] == (3).to_bytes(4, "big")
    assert reader.read(short[:cut]) is None
    assert reader.read(short) == _expected(short)


@pytest.mark.parametrize("version", pf.VERSIONS)
def test_other_shapes_take_the_generic_path(version: int) -> None:
    two_parts = _frame(version, topics=[("t", [(0, b"a"), (1, b"b")])])
    two_topics = _frame(version, topics=[("t", [(0, b"a")]), ("u", [(0, b"b")])])
    no_topics = _frame(version, topics=[])
    no_parts = _frame(version, topics=[("t", [])])
    null_records = _frame(version, topics=[("t", [(0, None)])])
    good = _frame(version)
    trailing = good + b"\0"
    refused = [two_parts, two_topics, no_topics, no_parts, null_records, trailing]
    if version >= 9:  # a tagged field on the request (its last byte counts them)
        refused.append(good[:-1] + b"\x01\x00\x00")
    for frame in refused:
        reader = pf.SingleProduceReader()
        assert reader.read(good) is not None  # the layout remembered, then not matched
        assert pf.parse_single(frame) is None
        assert reader.read(frame) is None


@pytest.mark.parametrize("version", [*pf.VERSIONS, 13])
def test_truncated_and_foreign_frames_are_refused_without_raising(version: int) -> None:
    good = _frame(version, topics=[("t", [(0, b"r" * 300)])]) if version < 13 else None
    if good is None:
        import uuid

        mod = request_module(PRODUCE, 13)
        request = build(request_class(PRODUCE, 13), transactional_id=None, acks=1, timeout=1,
                        topic_data=(build(mod.TopicProduceData, topic_id=uuid.uuid4(), partition_data=(
                            build(mod.PartitionProduceData, index=0, records=b"r"),)),))  # fmt: skip
        v13 = encode_request(RequestHeader(PRODUCE, 13, 1, "c"), request)[4:]
        assert pf.parse_single(v13) is None  # topics by id: the generic path
        return
    reader = pf.SingleProduceReader()
    assert reader.read(good) is not None
    for cut in range(len(good)):
        assert pf.parse_single(good[:cut]) is None
        assert reader.read(good[:cut]) is None
    fetch = b"\0\x01" + good[2:]
    assert pf.parse_single(fetch) is None
    assert reader.read(fetch) is None
    rnd = random.Random(version)
    for _ in range(300):  # garbage after a valid prefix, and flipped bytes: never an exception
        data = bytearray(good)
        for _ in range(rnd.randrange(1, 4)):
            data[rnd.randrange(len(data))] = rnd.getrandbits(8)
        result = pf.parse_single(bytes(data))
        if result is not None:
            assert result == _expected(bytes(data))
        reader.read(bytes(data))


@pytest.mark.parametrize("version", pf.VERSIONS)
def test_response_template_writes_what_the_encoder_and_kio_write(version: int) -> None:
    rnd = random.Random(version)
    for topic in TOPICS:
        template = pf.ResponseTemplate(version, topic)  # one for every partition of the topic
        for partition, _ in itertools.product([0, 5, 2**31 - 1, 255, 256, -1], range(5)):
            corr = rnd.randrange(-(2**31), 2**31)
            base = rnd.choice([0, 41, 2**62])
            append_time = rnd.choice([-1, 1_700_000_000_123])
            start = rnd.choice([-1, 0, 5]) if version >= 5 else -1
            ours = template.frame(corr, partition, base, append_time, start)
            general = hp.produce_frame(version, corr, hp.ProduceResponse(
                [(topic, [hp.ProducePartition(partition, 0, base, append_time, start)])]))  # fmt: skip
            assert ours == general
            mod = response_module(PRODUCE, version)
            entity = build(response_class(PRODUCE, version), throttle_time=0, responses=(
                build(mod.TopicProduceResponse, name=topic, partition_responses=(
                    build(mod.PartitionProduceResponse, index=partition, error_code=0,
                          base_offset=base, log_append_time=append_time, log_start_offset=start,
                          record_errors=(), error_message=None),)),))  # fmt: skip
            assert ours == encode_response(PRODUCE, version, corr, entity)
            assert decode_response(PRODUCE, version, ours[4:]) == (corr, entity)


@pytest.mark.parametrize("version", pf.VERSIONS)
def test_templates_answer_only_the_shape_they_fit(version: int) -> None:
    """A connection's templates write the one-partition success answer; every other answer (an
    error, two partitions, a leader hint) is the general encoder's, byte for byte."""
    templates = pf.ResponseTemplates()
    ok = hp.ProduceResponse([("t", [hp.ProducePartition(3, 0, 41, -1, 0)])])
    refused = hp.ProduceResponse([("t", [hp.ProducePartition(3, 6, error_message="moved")])])
    two = hp.ProduceResponse([("t", [hp.ProducePartition(0, 0, 1), hp.ProducePartition(1, 0, 2)])])
    for response in (ok, refused, two, ok):
        assert templates.frame(version, 9, response) == hp.produce_frame(version, 9, response)
    assert len(templates._templates) == 1  # only the success answer made a template
