"""Hand-assembled request bytes, for requests no client (and no encoder) would write:
nulls where the schema forbids them, lengths that lie."""

from __future__ import annotations

import struct


def uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def cstr(s: str | None) -> bytes:
    """Compact (nullable) string."""
    if s is None:
        return b"\x00"
    data = s.encode()
    return uvarint(len(data) + 1) + data


def carr(items: list[bytes] | None) -> bytes:
    """Compact array of already-encoded items (None = null)."""
    if items is None:
        return b"\x00"
    return uvarint(len(items) + 1) + b"".join(items)


def lstr(s: str | None) -> bytes:
    """Legacy (int16-length) nullable string."""
    if s is None:
        return struct.pack(">h", -1)
    data = s.encode()
    return struct.pack(">h", len(data)) + data


def larr(items: list[bytes] | None) -> bytes:
    if items is None:
        return struct.pack(">i", -1)
    return struct.pack(">i", len(items)) + b"".join(items)


TAGS = b"\x00"  # an empty tagged-field section


def frame(api_key: int, version: int, correlation: int, body: bytes, flexible: bool = True) -> bytes:
    """Size prefix + request header (v2 if flexible, else v1, client id "t") + body."""
    header = struct.pack(">hhi", api_key, version, correlation) + lstr("t")
    if flexible:
        header += TAGS
    payload = header + body
    return struct.pack(">i", len(payload)) + payload
