"""Fetch response frames with the record data left out, to be spliced in from files.

A Fetch response is mostly record batches. To send those straight from the segment files
(``sendfile``), the frame is encoded in pieces: ``[bytes, region, bytes, region, ..., bytes]``
where each *region* stands for one partition's ``records`` and is written by the caller.

How: the handler puts :func:`placeholder` ``(i)`` (16 bytes: a per-process random token and
``i``) in partition *i*'s ``records``; :func:`encode_spliced` encodes the whole response with
``kio`` as usual (:func:`strom.protocol.messages.encode_response`), finds each placeholder in
order, and replaces it and its length prefix (int32 for non-flexible versions, unsigned varint
of length + 1 for flexible ones — the wire format of ``records``, not a ``kio`` detail) by the
region's real length prefix and the region itself; the frame's size prefix is corrected by the
difference. The result, once the regions are read in, is byte-identical to encoding the real
bytes (``tests/unit/protocol/test_fetch_encoding.py`` compares them for Fetch v4–v16).

The token is random per process, so a topic name or other field cannot forge a placeholder;
each placeholder is also checked to sit right after the expected length prefix.
Sans-IO: a region is any object with an integer ``length``; nothing here reads files.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

from strom.protocol.messages import encode_response
from strom.protocol.varint import encode_uvarint

PLACEHOLDER_SIZE = 16
_TOKEN = os.urandom(PLACEHOLDER_SIZE - 4)
_INT32 = struct.Struct(">i")
_FLEX_PREFIX = bytes([PLACEHOLDER_SIZE + 1])  # uvarint(16 + 1): one byte
_LEGACY_PREFIX = _INT32.pack(PLACEHOLDER_SIZE)


class Region(Protocol):
    @property
    def length(self) -> int: ...


R = TypeVar("R", bound=Region)


class SpliceError(Exception):
    """A placeholder was not found where expected (a bug, never the peer's doing)."""


def placeholder(index: int) -> bytes:
    """The ``records`` value standing for region ``index`` of a response."""
    return _TOKEN + index.to_bytes(4, "big")


uvarint = encode_uvarint  # the one varint module's writer


def encode_spliced(
    api_key: int, api_version: int, correlation_id: int, response: Any, regions: Sequence[R]
) -> list[bytes | R]:
    """The response frame as bytes and regions in wire order (see the module docstring).

    ``response`` carries ``placeholder(i)`` as the records of the partition that region ``i``
    fills, in encoding order (topics, then partitions, as listed).
    """
    frame = encode_response(api_key, api_version, correlation_id, response)
    flexible = bool(type(response).__flexible__)
    old_prefix = _FLEX_PREFIX if flexible else _LEGACY_PREFIX
    parts: list[bytes | R] = []
    pending = bytearray()
    start = 0
    growth = 0
    for i, region in enumerate(regions):
        at = frame.find(placeholder(i), start)
        prefix_at = at - len(old_prefix)
        if at < 0 or prefix_at < start or frame[prefix_at:at] != old_prefix:
            raise SpliceError(f"placeholder {i} not found after its length prefix")
        new_prefix = uvarint(region.length + 1) if flexible else _INT32.pack(region.length)
        pending += frame[start:prefix_at]
        pending += new_prefix
        parts.append(bytes(pending))
        parts.append(region)
        pending.clear()
        start = at + PLACEHOLDER_SIZE
        growth += len(new_prefix) - len(old_prefix) + region.length - PLACEHOLDER_SIZE
    tail = frame[start:]
    if parts:
        head = bytearray(parts[0])  # type: ignore[arg-type]
        _INT32.pack_into(head, 0, len(frame) - 4 + growth)
        parts[0] = bytes(head)
        parts.append(tail)
        return parts
    return [frame]


def frame_length(parts: Sequence[bytes | Region]) -> int:
    """Total bytes on the wire (size prefix included)."""
    return sum(len(p) if isinstance(p, bytes) else p.length for p in parts)
