"""Admin requests confluent-kafka does not offer, sent over strom's own codec.

Used for the transaction tools (KIP-664: ListTransactions, DescribeTransactions,
DescribeProducers; WriteTxnMarkers for an operator's abort), the reassignment APIs, the log
dir APIs and the cluster-wide default broker config (librdkafka cannot name the ``""``
resource). One request per connection to the address given. Not a Kafka client: no metadata,
no retries; which broker a request must go to in a cluster (a leader, a coordinator, every
broker) is :mod:`strom.admin.routing`'s job, and data goes through confluent-kafka, except the
Spark source's reads of raw record batches and the Spark sink's writes of them
(:mod:`strom.spark.wire` and :mod:`strom.spark.batch_sender` use this connection).

Security: a connection is secured as its :class:`~strom.admin.client_security.WireSecurity`
says (TLS for ``security.protocol=SSL``; SASL is refused in one line), given explicitly (the
Spark source) or else the process's default, set once by :func:`use_security` (the CLI and the
console, one cluster per process, from the same ``-X``/profile settings their
confluent-kafka clients get).
"""

from __future__ import annotations

import socket
import struct
from typing import Any, Self

from kio.index import load_payload_module
from kio.static.constants import EntityType

from strom.admin.addresses import connect_timeout_reason
from strom.admin.client_security import AuthenticationError, WireSecurity
from strom.admin.errors import RefusedError, TimedOutError, UnreachableError
from strom.protocol.errors import ErrorCode
from strom.protocol.messages import (
    RequestHeader,
    build,
    decode_response,
    encode_request,
    request_class,
)

_default_security = WireSecurity()


def use_security(security: WireSecurity) -> None:
    """The security of this process's connections that are given none (module doc)."""
    global _default_security
    _default_security = security


class WireConnection:
    """A blocking connection that sends one built request at a time and decodes its answer."""

    def __init__(self, bootstrap: str, timeout: float = 10.0, client_id: str = "strom-cli",
                 security: WireSecurity | None = None) -> None:  # fmt: skip
        host, _, port = bootstrap.rpartition(":")
        sock = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout)
        self.sock = (security or _default_security).wrap(sock, host.strip("[]"))
        self.client_id = client_id
        self._correlation = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

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
        """Send one request and wait for its answer (the decoded response)."""
        return self.receive(api_key, version, self.send(api_key, version, **fields))

    def send(self, api_key: int, version: int, **fields: Any) -> int:
        """Send one request without waiting for its answer; returns its correlation id, which
        :meth:`receive` takes. The broker answers one connection's requests in the order they
        were sent, so answers are received in that order too."""
        self._correlation += 1
        req = build(request_class(api_key, version), **fields)
        header = RequestHeader(api_key, version, self._correlation, self.client_id)
        self.sock.sendall(encode_request(header, req))
        return self._correlation

    def receive(self, api_key: int, version: int, correlation: int) -> Any:
        """The decoded answer to the request :meth:`send` sent as ``correlation`` (the oldest
        one not yet received); ConnectionError if the broker answered another one."""
        answered, response = decode_response(api_key, version, self.recv_frame())
        if answered != correlation:
            raise ConnectionError(f"answer to request {answered}, expected {correlation}")
        return response


def request(bootstrap: str, api_key: int, version: int, *, wait_s: float = 10.0,
            **fields: Any) -> Any:  # fmt: skip
    """Send one request to the first address of ``bootstrap`` and return the decoded response;
    an unreachable broker is an :class:`UnreachableError` (:class:`TimedOutError` when the
    connection or the answer did not come within ``wait_s`` seconds). ``fields`` are the
    request's (``wait_s`` is no Kafka field name, so it cannot shadow one)."""
    timeout = wait_s
    server = bootstrap.split(",")[0].strip()
    try:
        conn = WireConnection(server, timeout=timeout)
    except AuthenticationError as exc:
        raise RefusedError(f"the broker at {server} refused the login: {exc}") from None
    except TimeoutError:
        raise TimedOutError(
            f"cannot reach the broker at {server}: {connect_timeout_reason(timeout)}"
        ) from None
    except OSError as exc:
        raise UnreachableError(f"cannot reach the broker at {server}: {exc}") from None
    try:
        with conn:
            return conn.request(api_key, version, **fields)
    except TimeoutError:
        raise TimedOutError(
            f"cannot reach the broker at {server}: no answer within {timeout:g} s"
        ) from None
    except (OSError, ConnectionError) as exc:
        raise UnreachableError(f"cannot reach the broker at {server}: {exc}") from None


def part(api_key: int, version: int, class_name: str, **fields: Any) -> Any:
    """A nested request entity of that API version, by class name."""
    return build(getattr(load_payload_module(api_key, version, EntityType.request), class_name),
                 **fields)  # fmt: skip


def error_name(code: Any) -> str:
    """Kafka's name of a wire error code (``NOT_LEADER_OR_FOLLOWER``)."""
    return ErrorCode(int(code)).name.upper()


def check(code: Any, what: str) -> None:
    """A :class:`RefusedError` ``what: NAME`` unless ``code`` is 0."""
    if int(code) != 0:
        raise RefusedError(f"{what}: {error_name(code)}")
