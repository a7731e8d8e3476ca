"""The varints of the Kafka protocol, in one place (sans-IO).

Two encodings, both 7 bits a byte, least significant group first, high bit = "more follows":

* **unsigned** varints (``uvarint``): the flexible versions' compact lengths (``n + 1``, 0 =
  null), tag numbers and sizes, array counts of internal records. Kafka's
  ``ByteUtils.readUnsignedVarint`` reads at most 5 bytes (32 bits), and so does
  :func:`read_uvarint`.
* **zigzag** varints / varlongs (``varint``): every field of a record inside a v2 batch
  (lengths, timestamp and offset deltas, header counts), ``(n << 1) ^ (n >> 63)``, so small
  negative numbers stay short. At most 10 bytes, and the value must fit 64 bits.

Every reader of the code base uses these functions: the request checker, the produce fast
path, the transaction log codec, the record codec's pure-Python walk
(:mod:`strom.protocol._records_py`, which inlines the one- and two-byte cases in its loop) and
the CLI's size estimate. The native record codec (:mod:`strom.protocol._records_native`)
implements the same rules in C; the differential tests hold the two to the same answers.

Readers raise :class:`VarintError` (a ``ValueError``) when the bytes end inside the varint or
it is longer than its encoding allows; callers turn it into their own protocol error.
"""

from __future__ import annotations

Buffer = bytes | bytearray | memoryview

UVARINT_MAX_BYTES = 5
VARLONG_MAX_BYTES = 10


class VarintError(ValueError):
    """A varint runs past the end of its buffer or is longer than its encoding allows."""


def encode_uvarint(value: int) -> bytes:
    """Unsigned varint of ``value`` (``value >= 0``)."""
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def read_uvarint(buf: Buffer, pos: int, end: int | None = None) -> tuple[int, int]:
    """``(value, next position)`` of the unsigned varint at ``pos`` (at most 5 bytes), bounded
    by ``end`` (default: the end of ``buf``)."""
    if end is None:
        end = len(buf)
    if pos < end:
        b = buf[pos]
        if b < 0x80:
            return b, pos + 1
    result = 0
    shift = 0
    while True:
        if pos >= end:
            raise VarintError("varint runs past the end of its buffer")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift >= 7 * UVARINT_MAX_BYTES:
            raise VarintError(f"unsigned varint longer than {UVARINT_MAX_BYTES} bytes")


def zigzag(value: int) -> int:
    """The zigzag form of a signed 64-bit ``value`` (what a varint/varlong carries)."""
    return ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF


def unzigzag(raw: int) -> int:
    """The signed value of a zigzag-encoded ``raw``."""
    return (raw >> 1) ^ -(raw & 1)


def encode_varint(value: int) -> bytes:
    """Zigzag varint/varlong of a signed 64-bit ``value``."""
    n = zigzag(value)
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def varint_size(value: int) -> int:
    """Bytes :func:`encode_varint` writes for ``value``."""
    n = zigzag(value)
    size = 1
    while n > 0x7F:
        n >>= 7
        size += 1
    return size


def read_raw_varint(buf: Buffer, pos: int, end: int) -> tuple[int, int]:
    """``(raw, next position)``: the still zigzag-encoded varint/varlong at ``pos``, bounded by
    ``end``. At most 10 bytes, and the tenth may carry only bit 63 (the value fits 64 bits)."""
    result = 0
    shift = 0
    while True:
        if pos >= end:
            raise VarintError("varint runs past the end of its buffer")
        b = buf[pos]
        pos += 1
        if shift == 63 and b > 1:
            raise VarintError("varlong longer than 64 bits")
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def read_varint(buf: Buffer, pos: int, end: int | None = None) -> tuple[int, int]:
    """``(value, next position)`` of the zigzag varint/varlong at ``pos``, bounded by ``end``
    (default: the end of ``buf``)."""
    raw, pos = read_raw_varint(buf, pos, len(buf) if end is None else end)
    return (raw >> 1) ^ -(raw & 1), pos
