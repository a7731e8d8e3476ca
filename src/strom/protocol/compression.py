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


class DecompressedTooLargeError(CompressionCodecError):
    """The payload decompresses to more than the caller's bound (a "compression bomb")."""


def decompress(codec: int, data: Buffer, max_size: int | None = None) -> bytes:
    """Decompress ``data`` written with ``codec``.

    With ``max_size``, never produces (or allocates) more than that many bytes: a payload
    that would expand further raises :class:`DecompressedTooLargeError`.
    Raises :class:`CompressionCodecError` on an unknown codec or an undecodable payload.
    """
    raw = bytes(data)
    if max_size is not None and codec != NONE:
        return _decompress_bounded(codec, raw, max_size)
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


_MODULES = {GZIP: cramjam.gzip, LZ4: cramjam.lz4, ZSTD: cramjam.zstd}
# Largest expansion the format allows: DEFLATE 1032:1, an LZ4 sequence 255 bytes per byte of
# match length. zstd (RLE blocks) and snappy (length claimed up front) have no useful bound.
_MAX_RATIO = {GZIP: 1032, LZ4: 256}


def _decompress_bounded(codec: int, raw: bytes, max_size: int) -> bytes:
    """Decompress into buffers of growing size, never beyond ``max_size`` + 1 bytes.

    cramjam's ``decompress_into`` stops with an error when its output buffer is full, so a
    small payload that claims gigabytes costs at most ``max_size`` bytes of memory.
    """
    name = CODEC_NAMES.get(codec, str(codec))
    if codec == SNAPPY:
        if raw.startswith(XERIAL_MAGIC):
            out = _snappy_decompress(raw, max_size)
        else:
            try:
                claimed = int(cramjam.snappy.decompress_raw_len(raw))
            except Exception as exc:
                raise CompressionCodecError(f"cannot decompress snappy payload: {exc}") from exc
            if claimed > max_size:
                raise DecompressedTooLargeError(
                    f"snappy payload expands to {claimed} bytes, more than {max_size}"
                )
            out = decompress(codec, raw)
        return out
    module = _MODULES.get(codec)
    if module is None:
        raise CompressionCodecError(f"unknown compression codec {codec}")
    ratio = _MAX_RATIO.get(codec)
    if ratio is not None and len(raw) * ratio <= max_size:
        return decompress(codec, raw)  # cannot expand past the bound: the fast, plain call
    size = min(max_size + 1, max(1 << 12, 8 * len(raw)))
    while True:
        buf = bytearray(size)
        try:
            written = int(module.decompress_into(raw, buf))
        except Exception as exc:
            if "whole buffer" not in str(exc):  # cramjam's words for "output buffer full"
                raise CompressionCodecError(f"cannot decompress {name} payload: {exc}") from exc
            if size > max_size:
                raise DecompressedTooLargeError(
                    f"{name} payload expands to more than {max_size} bytes"
                ) from exc
            size = min(max_size + 1, size * 4)
            continue
        if written > max_size:
            raise DecompressedTooLargeError(f"{name} payload expands to more than {max_size} bytes")
        if written < size:
            del buf[written:]
            return bytes(buf)
        size = min(max_size + 1, size * 4)  # exactly full: there may be more


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


def _snappy_decompress(raw: bytes, max_size: int | None = None) -> bytes:
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
        block = raw[pos : pos + size]
        if max_size is not None:
            try:
                claimed = int(cramjam.snappy.decompress_raw_len(block))
            except Exception as exc:
                raise CompressionCodecError(f"cannot decompress snappy block: {exc}") from exc
            if len(out) + claimed > max_size:
                raise DecompressedTooLargeError(f"snappy payload expands to more than {max_size}")
        out += bytes(cramjam.snappy.decompress_raw(block))
        pos += size
    return bytes(out)
