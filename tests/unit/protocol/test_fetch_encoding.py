"""Spliced Fetch frames (records left out, as regions) equal the frames kio writes in one go."""

from __future__ import annotations

import os
import random
import uuid
from dataclasses import dataclass

import pytest

from strom.protocol import fetch_encoding as fe
from strom.protocol.messages import (
    build,
    decode_response,
    encode_response,
    response_class,
    response_module,
)

FETCH = 1


@dataclass
class FakeRegion:
    data: bytes

    @property
    def length(self) -> int:
        return len(self.data)


def _response(version: int, records: list[list[bytes]]) -> object:
    mod = response_module(FETCH, version)
    topics = []
    for t, parts in enumerate(records):
        partitions = tuple(
            build(mod.PartitionData, partition_index=p, error_code=0, high_watermark=1000 + p,
                  last_stable_offset=1000 + p, log_start_offset=p, aborted_transactions=None,
                  preferred_read_replica=-1, records=rec)
            for p, rec in enumerate(parts)
        )
        topics.append(build(mod.FetchableTopicResponse, topic=f"topic-{t}-é",
                            topic_id=uuid.UUID(int=t + 1), partitions=partitions))
    return build(response_class(FETCH, version), throttle_time=0, error_code=0, session_id=0,
                 responses=tuple(topics))


def _spliced(version: int, records: list[list[bytes]], corr: int) -> list[bytes | FakeRegion]:
    regions: list[FakeRegion] = []
    with_placeholders = []
    for parts in records:
        row = []
        for rec in parts:
            if rec:
                row.append(fe.placeholder(len(regions)))
                regions.append(FakeRegion(rec))
            else:
                row.append(b"")
        with_placeholders.append(row)
    return fe.encode_spliced(FETCH, version, corr, _response(version, with_placeholders), regions)


def _join(parts: list[bytes | FakeRegion]) -> bytes:
    return b"".join(p if isinstance(p, bytes) else p.data for p in parts)


SIZES = [
    [[b"", b"", b""]],  # no data at all
    [[os.urandom(100)]],
    [[os.urandom(61), b"", os.urandom(5000)], [b"", os.urandom(200_000)]],
    [[os.urandom(126)], [os.urandom(127)], [os.urandom(128)], [os.urandom(16383)], [os.urandom(16384)]],
    [[os.urandom(2_100_000), os.urandom(1)]],  # 3- and 4-byte varint lengths
]


@pytest.mark.parametrize("version", range(4, 17))
@pytest.mark.parametrize("case", range(len(SIZES)))
def test_spliced_frame_is_byte_identical(version: int, case: int) -> None:
    records = SIZES[case]
    corr = random.randrange(2**31)
    expected = encode_response(FETCH, version, corr, _response(version, records))
    parts = _spliced(version, records, corr)
    assert _join(parts) == expected
    assert fe.frame_length(parts) == len(expected)
    regions = [p for p in parts if not isinstance(p, bytes)]
    assert len(regions) == sum(1 for t in records for r in t if r)
    # and a client reads back the same records
    correlation, decoded = decode_response(FETCH, version, _join(parts)[4:])
    assert correlation == corr
    assert [[bytes(p.records or b"") for p in t.partitions] for t in decoded.responses] == records


def test_placeholders_are_unforgeable_and_distinct() -> None:
    assert len({fe.placeholder(i) for i in range(1000)}) == 1000
    assert all(len(fe.placeholder(i)) == fe.PLACEHOLDER_SIZE for i in (0, 1, 2**31))


def test_kio_writes_records_as_length_prefix_then_raw_bytes() -> None:
    """Guards what encode_spliced relies on: kio writes ``records`` as the wire format says
    (int32 length, or uvarint length + 1 when flexible) followed by the bytes unchanged."""
    marker = fe.placeholder(7)
    for version in range(4, 17):
        frame = encode_response(FETCH, version, 1, _response(version, [[marker]]))
        at = frame.index(marker)
        prefix = bytes([17]) if response_class(FETCH, version).__flexible__ else (16).to_bytes(4, "big")
        assert frame[at - len(prefix) : at] == prefix


def test_missing_placeholder_is_an_error() -> None:
    response = _response(12, [[b"x" * 16]])
    with pytest.raises(fe.SpliceError):
        fe.encode_spliced(FETCH, 12, 1, response, [FakeRegion(b"abc")])


@pytest.mark.parametrize("value", [0, 1, 127, 128, 16383, 16384, 2**21, 2**31 - 1])
def test_uvarint(value: int) -> None:
    out = fe.uvarint(value)
    n, shift = 0, 0
    for b in out:
        n |= (b & 0x7F) << shift
        shift += 7
    assert n == value and all(b & 0x80 for b in out[:-1]) and not out[-1] & 0x80
