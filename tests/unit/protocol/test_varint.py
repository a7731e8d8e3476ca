"""The one varint module: unsigned varints (flexible versions) and zigzag varints (records)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strom.protocol import varint

# Kafka's own encodings (ByteUtils tests): value -> bytes
UNSIGNED = {0: b"\x00", 1: b"\x01", 127: b"\x7f", 128: b"\x80\x01", 16383: b"\xff\x7f",
            16384: b"\x80\x80\x01", 2**31 - 1: b"\xff\xff\xff\xff\x07",
            2**32 - 1: b"\xff\xff\xff\xff\x0f"}  # fmt: skip
ZIGZAG = {0: b"\x00", -1: b"\x01", 1: b"\x02", -64: b"\x7f", 64: b"\x80\x01",
          2**63 - 1: b"\xfe" + b"\xff" * 8 + b"\x01", -(2**63): b"\xff" * 9 + b"\x01"}  # fmt: skip


@pytest.mark.parametrize(("value", "encoded"), UNSIGNED.items())
def test_unsigned_encodings(value: int, encoded: bytes) -> None:
    assert varint.encode_uvarint(value) == encoded
    assert varint.read_uvarint(b"\xaa" + encoded + b"\xbb", 1) == (value, 1 + len(encoded))


@pytest.mark.parametrize(("value", "encoded"), ZIGZAG.items())
def test_zigzag_encodings(value: int, encoded: bytes) -> None:
    assert varint.encode_varint(value) == encoded
    assert varint.varint_size(value) == len(encoded)
    assert varint.read_varint(encoded, 0) == (value, len(encoded))


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_zigzag_round_trip(value: int) -> None:
    data = varint.encode_varint(value)
    assert varint.read_varint(data + b"\x00", 0) == (value, len(data))
    assert varint.unzigzag(varint.zigzag(value)) == value


@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_unsigned_round_trip(value: int) -> None:
    data = varint.encode_uvarint(value)
    assert varint.read_uvarint(data, 0) == (value, len(data))


@pytest.mark.parametrize(
    "data",
    [b"", b"\x80", b"\xff\xff", b"\xff" * 5 + b"\x01"],  # truncated, and six bytes
)
def test_malformed_unsigned(data: bytes) -> None:
    with pytest.raises(varint.VarintError):
        varint.read_uvarint(data, 0)


@pytest.mark.parametrize(
    "data",
    [b"", b"\x80", b"\xff" * 10 + b"\x00",  # eleven bytes
     b"\xff" * 9 + b"\x02"],  # ten bytes whose last carries more than bit 63
)  # fmt: skip
def test_malformed_zigzag(data: bytes) -> None:
    with pytest.raises(varint.VarintError):
        varint.read_varint(data, 0)


def test_bounded_by_end() -> None:
    data = varint.encode_varint(300) + b"\x00"
    assert varint.read_varint(data, 0, 2) == (300, 2)
    with pytest.raises(varint.VarintError):
        varint.read_varint(data, 0, 1)
