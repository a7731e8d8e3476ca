"""A minimal, blocking Kafka protocol connection for tests of the wire itself.

Not a Kafka client: it sends exactly the request it is given (or raw bytes) and decodes one
response, so tests can send what real clients never would: garbage, bad CRCs, odd versions.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

from strom.protocol.messages import RequestHeader, decode_response, encode_request, request_class


class RawConnection:
    def __init__(self, bootstrap: str, timeout: float = 10.0) -> None:
        host, _, port = bootstrap.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self._correlation = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_frame(self) -> bytes:
        """One response frame without its size prefix; ConnectionError if the broker closed."""
        size = struct.unpack(">i", self._recv_exact(4))[0]
        return self._recv_exact(size)

    def _recv_exact(self, n: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < n:
            chunk = self.sock.recv(n - len(chunks))
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            chunks += chunk
        return bytes(chunks)

    def request(self, api_key: int, version: int, **fields: Any) -> Any:
        from strom.protocol.messages import build

        self._correlation += 1
        req = build(request_class(api_key, version), **fields)
        self.sock.sendall(encode_request(RequestHeader(api_key, version, self._correlation, "raw"), req))
        correlation, response = decode_response(api_key, version, self.recv_frame())
        assert correlation == self._correlation
        return response

    def is_closed_by_peer(self, timeout: float = 5.0) -> bool:
        """True if the broker closes the connection within ``timeout`` (reads until EOF)."""
        self.sock.settimeout(timeout)
        try:
            while True:
                if not self.sock.recv(65536):
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False
