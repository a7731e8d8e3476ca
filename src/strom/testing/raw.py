"""A minimal, blocking Kafka protocol connection for tests of the wire itself.

Not a Kafka client: it sends exactly the request it is given (or raw bytes) and decodes one
response, so tests can send what real clients never would: garbage, bad CRCs, odd versions.
"""

from __future__ import annotations

from strom.admin.wire import WireConnection


class RawConnection(WireConnection):
    """:class:`strom.admin.wire.WireConnection` plus what only wire tests do: raw bytes out,
    and watching for the broker to hang up."""

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

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
