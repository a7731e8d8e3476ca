"""Record-batch compression codecs (sans-IO).

Codec ids are the values of bits 0-2 of a record batch's ``attributes``:
0 none, 1 gzip, 2 snappy, 3 lz4 (LZ4 frame format), 4 zstd.

Snappy needs care: the Java client (snappy-java) writes the *xerial* framing, not raw snappy::

    magic  b"\\x82SNAPPY\\x00"  (8 bytes)
    version int32, compatible version int32
    then blocks: int32 length (big-endian) + raw snappy block, repeated until the end

librdkafka writes raw snappy. :func:`decompress` accepts both; :func:`compress` writes raw
snappy, which every client reads.

Only the codec paths that really need the payload (internal topics, the compactor, tests) call
these; the broker's produce and fetch paths never decompress.
"""

from __future__ import annotations

import struct

import cramjam

NONE = 0
GZIP = 1
SNAPPY = 2
LZ4 = 3
ZSTD = 4

CODEC_NAMES: dict[int, str] = {
    NONE: "none",
    GZIP: "gzip",
    SNAPPY: "snappy",
    LZ4: "lz4",
    ZSTD: "zstd",
}

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER_SIZE = 16

Buffer = bytes | bytearray | memoryview


class CompressionCodecError(ValueError):
    """An unknown codec id, or a payload the codec cannot decode."""


def compress(codec: int, data: Buffer) -> bytes:
    """Compress ``data`` with ``codec``; codec 0 returns the bytes unchanged."""
    raw = bytes(data)
    if codec == NONE:
        return raw
    if codec == GZIP:
        return bytes(cramjam.gzip.compress(raw))
    if codec == SNAPPY:
        return bytes(cramjam.snappy.compress_raw(raw))
    if codec == LZ4:
        return bytes(cramjam.lz4.compress(raw))
    if codec == ZSTD:
        return bytes(cramjam.zstd.compress(raw))
    raise CompressionCodecError(f"unknown compression codec {codec}")


def decompress(codec: int, data: Buffer) -> bytes:
    """Decompress ``data`` written with ``codec``.

    Raises :class:`CompressionCodecError` on an unknown codec or an undecodable payload.
    """
    raw = bytes(data)
    try:
        if codec == NONE:
            return raw
        if codec == GZIP:
            return bytes(cramjam.gzip.decompress(raw))
        if codec == SNAPPY:
            return _snappy_decompress(raw)
        if codec == LZ4:
            return bytes(cramjam.lz4.decompress(raw))
        if codec == ZSTD:
            return bytes(cramjam.zstd.decompress(raw))
    except CompressionCodecError:
        raise
    except Exception as exc:  # cramjam raises its own DecompressionError and ValueErrors
        name = CODEC_NAMES.get(codec, str(codec))
        raise CompressionCodecError(f"cannot decompress {name} payload: {exc}") from exc
    raise CompressionCodecError(f"unknown compression codec {codec}")


def xerial_snappy_compress(data: Buffer, block_size: int = 32 * 1024) -> bytes:
    """Write ``data`` in the xerial/snappy-java framing (what the Java client produces)."""
    raw = bytes(data)
    out = bytearray(XERIAL_MAGIC)
    out += struct.pack(">ii", 1, 1)
    for start in range(0, len(raw), block_size):
        block = bytes(cramjam.snappy.compress_raw(raw[start : start + block_size]))
        out += struct.pack(">i", len(block))
        out += block
    return bytes(out)


def _snappy_decompress(raw: bytes) -> bytes:
    if not raw.startswith(XERIAL_MAGIC):
        return bytes(cramjam.snappy.decompress_raw(raw))
    pos = _XERIAL_HEADER_SIZE
    out = bytearray()
    while pos < len(raw):
        if pos + 4 > len(raw):
            raise CompressionCodecError("truncated xerial snappy block length")
        (size,) = struct.unpack_from(">i", raw, pos)
        pos += 4
        if size < 0 or pos + size > len(raw):
            raise CompressionCodecError("truncated xerial snappy block")
        out += bytes(cramjam.snappy.decompress_raw(raw[pos : pos + size]))
        pos += size
    return bytes(out)
