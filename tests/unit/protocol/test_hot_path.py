"""The hand-written Produce/Fetch response encoders write exactly what kio writes, for every
version the broker serves, and kio decodes their bytes back to the same response."""

from __future__ import annotations

import io
import os
import random
import uuid
from dataclasses import dataclass
from typing import Any

import pytest

from strom.protocol import hot_path as hp
from strom.protocol.messages import (
    build,
    decode_response,
    encode_response,
    response_class,
    response_module,
)

PRODUCE, FETCH = 0, 1
NAMES = ["t", "topic-é-ü", "x" * 200]


@dataclass
class FakeRegion:
    data: bytes

    @property
    def length(self) -> int:
        return len(self.data)


def _produce_cases() -> list[hp.ProduceResponse]:
    rnd = random.Random(6)
    cases = [
        hp.ProduceResponse(topics=[("t", [hp.ProducePartition(0, 0, 41, -1, 0)])]),
        hp.ProduceResponse(topics=[], throttle_time_ms=17),
        hp.ProduceResponse(topics=[("t", [])]),
    ]
    topics = []
    for name in NAMES:
        parts = [
            hp.ProducePartition(
                partition_index=rnd.randrange(0, 2**31 - 1),
                error_code=rnd.choice([0, 2, 3, 10, 87]),
                base_offset=rnd.choice([-1, 0, 2**62]),
                log_append_time=rnd.choice([-1, 1_700_000_000_123]),
                log_start_offset=rnd.choice([-1, 0, 5]),
                error_message=rnd.choice([None, "", "bad batch: ünicode"]),
                record_errors=rnd.choice([(), ((0, None),), ((3, "null key"), (7, ""))]),
            )
            for _ in range(rnd.randrange(1, 5))
        ]
        topics.append((name, parts, uuid.UUID(int=rnd.getrandbits(128))))
    cases.append(hp.ProduceResponse(topics=topics, throttle_time_ms=3))
    # KIP-951: a NOT_LEADER_OR_FOLLOWER answer naming the new leader and its endpoint
    hinted = [hp.ProducePartition(0, 6, current_leader=(2, 7)),
              hp.ProducePartition(1, 74, current_leader=(3, 2**31 - 1)),
              hp.ProducePartition(2, 0, 5, -1, 0)]  # fmt: skip
    cases.append(hp.ProduceResponse(
        topics=[("t", hinted, uuid.UUID(int=5))],
        node_endpoints=[(2, "127.0.0.3", 9092, None), (3, "broker-ü.example", 2**31 - 1, "r1")],
    ))  # fmt: skip
    return cases


def _produce_entity(version: int, response: hp.ProduceResponse) -> Any:
    mod = response_module(PRODUCE, version)
    return build(
        response_class(PRODUCE, version),
        throttle_time=response.throttle_time_ms,
        responses=tuple(
            build(mod.TopicProduceResponse, name=t[0], topic_id=t[2] if len(t) > 2 else None,
                  partition_responses=tuple(
                build(mod.PartitionProduceResponse, index=p.partition_index, error_code=p.error_code,
                      base_offset=p.base_offset, log_append_time=p.log_append_time,
                      log_start_offset=p.log_start_offset, record_errors=tuple(
                          build(mod.BatchIndexAndErrorMessage, batch_index=i,
                                batch_index_error_message=m)
                          for i, m in p.record_errors) if version >= 8 else (),
                      error_message=p.error_message,
                      **({"current_leader": build(mod.LeaderIdAndEpoch, leader_id=p.current_leader[0],
                                                  leader_epoch=p.current_leader[1])}
                         if version >= 10 and p.current_leader is not None else {}))
                for p in t[1]))
            for t in response.topics
        ),
        **({"node_endpoints": tuple(build(mod.NodeEndpoint, node_id=n, host=h, port=port, rack=r)
                                    for n, h, port, r in response.node_endpoints)}
           if version >= 10 else {}),
    )  # fmt: skip


@pytest.mark.parametrize("version", hp.PRODUCE_VERSIONS)
@pytest.mark.parametrize("case", range(len(_produce_cases())))
def test_produce_response_matches_kio(version: int, case: int) -> None:
    response = _produce_cases()[case]
    if version < 8:  # error messages exist from v8 on: kio's encoding drops them before
        response = response._replace(topics=[
            (t[0], [p._replace(error_message=None, record_errors=()) for p in t[1]], *t[2:])
            for t in response.topics
        ])  # fmt: skip
    entity = _produce_entity(version, response)
    corr = 0x7FFF_0000 + version
    ours = hp.produce_frame(version, corr, response)
    assert ours == encode_response(PRODUCE, version, corr, entity)
    correlation, decoded = decode_response(PRODUCE, version, ours[4:])
    assert correlation == corr
    assert decoded == entity


def _fetch_cases() -> list[tuple[hp.FetchResponse, hp.FetchResponse]]:
    """(response with regions, the same with the regions' bytes inline)."""
    rnd = random.Random(16)
    cases = []
    layouts: list[list[list[Any]]] = [
        [[b"", b"", b""]],
        [[os.urandom(100)]],
        [[os.urandom(61), None, FakeRegion(os.urandom(5000))], [b"", FakeRegion(os.urandom(200_000))]],
        [[FakeRegion(os.urandom(126))], [FakeRegion(os.urandom(127))], [os.urandom(128)],
         [FakeRegion(os.urandom(16383))], [FakeRegion(os.urandom(16384))]],
        [[FakeRegion(os.urandom(2_100_000)), FakeRegion(os.urandom(1))]],
        [[]],
        [],
    ]  # fmt: skip
    for layout in layouts:
        topics, inline = [], []
        for t, row in enumerate(layout):
            parts, inline_parts = [], []
            for p, rec in enumerate(row):
                part = hp.FetchPartition(
                    partition_index=p,
                    error_code=rnd.choice([0, 0, 1, 3, 6]),
                    high_watermark=rnd.choice([-1, 0, 1000 + p, 2**62]),
                    last_stable_offset=rnd.choice([-1, 1000 + p]),
                    log_start_offset=rnd.choice([-1, 0, p]),
                    aborted_transactions=rnd.choice([None, (), ((7, 100), (2**40, 0))]),
                    preferred_read_replica=rnd.choice([-1, 2]),
                    records=rec,
                )
                parts.append(part)
                data = rec.data if isinstance(rec, FakeRegion) else rec
                inline_parts.append(part._replace(records=data))
            name, tid = NAMES[t % len(NAMES)] + str(t), uuid.UUID(int=rnd.getrandbits(128))
            topics.append(hp.FetchTopic(name, tid, parts))
            inline.append(hp.FetchTopic(name, tid, inline_parts))
        top = {"throttle_time_ms": rnd.choice([0, 9]), "error_code": rnd.choice([0, 0, 71]),
               "session_id": rnd.choice([0, 12345])}  # fmt: skip
        cases.append((hp.FetchResponse(topics, **top), hp.FetchResponse(inline, **top)))
    return cases


def _fetch_entity(version: int, response: hp.FetchResponse) -> Any:
    mod = response_module(FETCH, version)
    return build(
        response_class(FETCH, version),
        throttle_time=response.throttle_time_ms,
        error_code=response.error_code,
        session_id=response.session_id,
        responses=tuple(
            build(mod.FetchableTopicResponse, topic=t.topic, topic_id=t.topic_id,
                  partitions=tuple(
                      build(mod.PartitionData, partition_index=p.partition_index,
                            error_code=p.error_code, high_watermark=p.high_watermark,
                            last_stable_offset=p.last_stable_offset,
                            log_start_offset=p.log_start_offset,
                            aborted_transactions=None if p.aborted_transactions is None else tuple(
                                build(mod.AbortedTransaction, producer_id=a, first_offset=b)
                                for a, b in p.aborted_transactions),
                            preferred_read_replica=p.preferred_read_replica, records=p.records)
                      for p in t.partitions))
            for t in response.topics
        ),
    )  # fmt: skip


def _join(parts: list[Any]) -> bytes:
    return b"".join(p if isinstance(p, bytes) else p.data for p in parts)


@pytest.mark.parametrize("version", hp.FETCH_VERSIONS)
@pytest.mark.parametrize("case", range(len(_fetch_cases())))
def test_fetch_response_matches_kio(version: int, case: int) -> None:
    with_regions, inline = _fetch_cases()[case]
    if version < 7:  # top-level error and session id exist from v7 on
        with_regions = with_regions._replace(error_code=0, session_id=0)
        inline = inline._replace(error_code=0, session_id=0)
    entity = _fetch_entity(version, inline)
    corr = 0x10000 + version
    parts = hp.fetch_frame(version, corr, with_regions)
    regions = [p for p in parts if not isinstance(p, bytes)]
    assert regions == [
        p.records for t in with_regions.topics for p in t.partitions
        if isinstance(p.records, FakeRegion)
    ]  # fmt: skip
    ours = _join(parts)
    assert ours == encode_response(FETCH, version, corr, entity)
    assert int.from_bytes(ours[:4], "big") == len(ours) - 4
    correlation, decoded = decode_response(FETCH, version, ours[4:])
    assert correlation == corr
    assert decoded == entity


@pytest.mark.parametrize("flexible", [False, True])
@pytest.mark.parametrize("corr", [0, 1, -1, 2**31 - 1, -(2**31)])
def test_response_header_matches_kio(flexible: bool, corr: int) -> None:

    from kio.schema.response_header.v0.header import ResponseHeader as V0
    from kio.schema.response_header.v1.header import ResponseHeader as V1
    from kio.serial import entity_writer
    from kio.static.primitive import i32

    buf = io.BytesIO()
    cls = V1 if flexible else V0
    entity_writer(cls)(buf, cls(correlation_id=i32(corr)))
    assert hp.response_header(corr, flexible) == buf.getvalue()


@pytest.mark.parametrize("version", [4, 11, 12, 16])
@pytest.mark.parametrize("case", range(len(_fetch_cases())))
def test_large_records_in_memory_are_parts_of_their_own(version: int, case: int) -> None:
    """Records read into memory (no sendfile) of OWN_PART_BYTES or more are not copied into
    the frame: they are parts of it, the very objects, and the parts joined are kio's bytes."""
    _, inline = _fetch_cases()[case]
    if version < 7:
        inline = inline._replace(error_code=0, session_id=0)
    parts = hp.fetch_frame(version, 5, inline)
    large = [p.records for t in inline.topics for p in t.partitions
             if isinstance(p.records, bytes) and len(p.records) >= hp.OWN_PART_BYTES]  # fmt: skip
    assert [p for p in parts if any(p is r for r in large)] == large
    assert b"".join(parts) == encode_response(FETCH, version, 5, _fetch_entity(version, inline))
