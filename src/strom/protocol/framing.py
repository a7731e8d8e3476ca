"""Size-prefixed frames: ``int32 length | payload``, sans-IO.

:class:`FrameDecoder` takes bytes as they arrive and yields whole payloads. A negative length
or one above ``max_size`` (Kafka's ``socket.request.max.bytes``, 100 MiB by default) raises
:class:`FrameTooLargeError` before any of it is buffered, so a hostile size cannot make the
broker allocate it.
"""

from __future__ import annotations

import struct

_SIZE = struct.Struct(">i")


class FrameTooLargeError(Exception):
    """A frame announced a size the broker refuses to read."""


class FrameDecoder:
    """Accumulates bytes; :meth:`feed` returns every frame completed by them, in order.

    Each payload byte is copied once in user space. Small frames and the bytes between frames
    go through one ``bytearray``; once a frame's size is known and more of it is still owed
    than has arrived (a large Produce request or Fetch answer arriving over several reads), the
    pieces that arrive are kept as they are (``bytes`` are immutable: held, not copied) and
    joined once when the last one arrives, instead of being appended to the buffer and copied
    out of it again (which, with the 256 kB reads of uvloop, costs a 1 MB Produce frame an extra
    copy of itself)."""

    def __init__(self, max_size: int) -> None:
        self.max_size = max_size
        self._buf = bytearray()
        self._need: int | None = None
        #: the pieces of a large frame still being received (None: not collecting), their bytes
        self._parts: list[bytes | memoryview] | None = None
        self._have = 0

    def feed(self, data: bytes) -> list[bytes]:
        parts = self._parts
        if parts is not None:
            return self._collect(parts, data)
        if self._need is None and not self._buf and len(data) >= 4 and type(data) is bytes:
            # nothing buffered and a frame starts here: the common case of a client waiting
            # for each answer (exactly one whole frame: one slice instead of buffer, copy and
            # delete), or the first piece of a large frame (kept, not copied)
            (size,) = _SIZE.unpack_from(data, 0)
            if 0 <= size <= self.max_size:
                if size == len(data) - 4:
                    return [data[4:]]
                if size > len(data) - 4:
                    self._need = size
                    self._parts = [memoryview(data)[4:]]
                    self._have = len(data) - 4
                    return []
        self._buf += data
        return self._drain([])

    def _collect(self, parts: list[bytes | memoryview], data: bytes) -> list[bytes]:
        """One more piece of the large frame being received (see the class doc)."""
        need = self._need
        assert need is not None
        if type(data) is not bytes:  # a caller's mutable buffer: keep a copy of it
            data = bytes(data)
        have = self._have + len(data)
        if have < need:
            parts.append(data)
            self._have = have
            return []
        cut = len(data) - (have - need)  # where the frame ends in ``data``
        view = memoryview(data)
        parts.append(view[:cut])
        frame = b"".join(parts)
        self._parts = None
        self._have = 0
        self._need = None
        if cut == len(data):
            return [frame]
        self._buf += view[cut:]
        return self._drain([frame])

    def _drain(self, frames: list[bytes]) -> list[bytes]:
        """Append to ``frames`` every frame complete in the buffer; start collecting the pieces
        of a large frame once its size is known and most of it is still owed."""
        buf = self._buf
        pos = 0
        while True:
            if self._need is None:
                if len(buf) - pos < 4:
                    break
                (size,) = _SIZE.unpack_from(buf, pos)
                if size < 0 or size > self.max_size:
                    raise FrameTooLargeError(f"frame of {size} bytes (limit {self.max_size})")
                self._need = size
                pos += 4
            have = len(buf) - pos
            if have < self._need:
                if self._need - have > have:  # mostly still owed: collect the pieces
                    self._parts = [bytes(memoryview(buf)[pos:])]
                    self._have = have
                    pos = len(buf)
                break
            # one copy (a bytearray slice would copy twice); the view is gone before the del
            frames.append(bytes(memoryview(buf)[pos : pos + self._need]))
            pos += self._need
            self._need = None
        if pos:
            del buf[:pos]
        return frames

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as a frame (size prefixes not counted once read)."""
        return len(self._buf) + self._have
