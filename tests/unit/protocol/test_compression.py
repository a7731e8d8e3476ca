"""Compression codec round trips, including the Java client's xerial snappy framing."""

from __future__ import annotations

import cramjam
import pytest

from strom.protocol import compression as c

DATA = b"strom " * 5000 + bytes(range(256))


@pytest.mark.parametrize("codec", [c.NONE, c.GZIP, c.SNAPPY, c.LZ4, c.ZSTD])
def test_round_trip(codec: int) -> None:
    packed = c.compress(codec, DATA)
    if codec != c.NONE:
        assert len(packed) < len(DATA)
    assert c.decompress(codec, packed) == DATA


def test_empty_round_trip() -> None:
    for codec in (c.GZIP, c.SNAPPY, c.LZ4, c.ZSTD):
        assert c.decompress(codec, c.compress(codec, b"")) == b""


def test_snappy_accepts_xerial_framing() -> None:
    framed = c.xerial_snappy_compress(DATA, block_size=1000)
    assert framed.startswith(b"\x82SNAPPY\x00")
    assert c.decompress(c.SNAPPY, framed) == DATA


def test_snappy_accepts_raw_block() -> None:
    assert c.decompress(c.SNAPPY, bytes(cramjam.snappy.compress_raw(DATA))) == DATA


def test_truncated_xerial_rejected() -> None:
    framed = c.xerial_snappy_compress(DATA)
    with pytest.raises(c.CompressionCodecError):
        c.decompress(c.SNAPPY, framed[:-10])


def test_garbage_and_unknown_codec_rejected() -> None:
    with pytest.raises(c.CompressionCodecError):
        c.decompress(c.GZIP, b"not gzip at all")
    with pytest.raises(c.CompressionCodecError):
        c.decompress(7, b"x")
    with pytest.raises(c.CompressionCodecError):
        c.compress(5, b"x")
