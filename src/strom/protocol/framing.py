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
    """Accumulates bytes; :meth:`feed` returns every frame completed by them, in order."""

    def __init__(self, max_size: int) -> None:
        self.max_size = max_size
        self._buf = bytearray()
        self._need: int | None = None

    def feed(self, data: bytes) -> list[bytes]:
        if self._need is None and not self._buf and len(data) >= 4 and type(data) is bytes:
            # the common case of a client waiting for each answer: exactly one whole frame
            # arrived, and nothing is buffered; one slice instead of buffer, copy and delete
            (size,) = _SIZE.unpack_from(data, 0)
            if size == len(data) - 4 and size <= self.max_size:
                return [data[4:]]
        self._buf += data
        frames: list[bytes] = []
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
            if len(buf) - pos < self._need:
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
        """Bytes received but not yet returned as a frame."""
        return len(self._buf)
