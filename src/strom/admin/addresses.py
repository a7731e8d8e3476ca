"""Broker addresses, and a fast, specific check that one of them accepts connections.

librdkafka reports every connection problem as "Broker transport failure" after its own
timeouts, so before a client is built :func:`preflight` checks each address itself: malformed
(no port, bad port), unknown host (DNS), refused, or no TCP connection within the timeout
("timed out connecting": a host that drops the connection attempt, or a listener whose
queue of pending connections is full). It succeeds as soon as one address accepts a TCP
connection, and reports the first address's reason otherwise: one line, as soon as it is
known.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass

from strom.admin.errors import InvalidInputError, TimedOutError, UnreachableError


@dataclass(frozen=True)
class Address:
    """One ``host:port`` of a bootstrap list (IPv6 literals in brackets)."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_addresses(bootstrap: str) -> list[Address]:
    """A comma-separated ``host:port`` list; :class:`InvalidInputError` naming a bad entry."""
    entries = [e.strip() for e in bootstrap.split(",") if e.strip()]
    if not entries:
        raise InvalidInputError("malformed broker address '': expected HOST:PORT")
    result = []
    for entry in entries:
        text = entry.split("://", 1)[1] if "://" in entry else entry  # PLAINTEXT://h:p
        host, sep, port = text.rpartition(":")
        host = host.strip("[]")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise InvalidInputError(
                f"malformed broker address {entry!r}: expected HOST:PORT (e.g. localhost:9092)"
            )
        result.append(Address(host, int(port)))
    return result


def connect_timeout_reason(seconds: float) -> str:
    """What a TCP connection attempt that got no answer is called, everywhere."""
    return f"timed out connecting (no TCP connection within {seconds:g} s)"


def probe(address: Address, deadline: float, timeout: float) -> str | None:
    """None if ``address`` accepts a TCP connection before ``deadline``, else the reason
    (``timeout`` is the whole wait, named in the reason)."""
    try:
        infos = socket.getaddrinfo(address.host, address.port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        return f"cannot resolve host {address.host!r} ({exc.strerror})"
    reason = "no address"
    for family, kind, proto, _name, sockaddr in infos:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        with socket.socket(family, kind, proto) as sock:
            sock.settimeout(left)
            try:
                sock.connect(sockaddr)
                return None
            except ConnectionRefusedError:
                reason = "connection refused (is a broker running there?)"
            except TimeoutError:
                reason = connect_timeout_reason(timeout)
            except OSError as exc:
                reason = exc.strerror or str(exc)
    if deadline - time.monotonic() <= 0 and reason == "no address":
        reason = connect_timeout_reason(timeout)
    return reason


def preflight(bootstrap: str, timeout: float) -> None:
    """Return once some address of ``bootstrap`` accepts a TCP connection; otherwise raise
    :class:`TimedOutError` (no connection within ``timeout``) or :class:`UnreachableError`
    naming the first address's reason."""
    addresses = parse_addresses(bootstrap)
    deadline = time.monotonic() + timeout
    reasons = []
    for address in addresses:
        reason = probe(address, deadline, timeout)
        if reason is None:
            return
        reasons.append(f"{address}: {reason}")
    more = f" (and {len(reasons) - 1} more address(es) failed)" if len(reasons) > 1 else ""
    message = f"cannot connect to the broker at {reasons[0]}{more}"
    timed_out = reasons[0].endswith(connect_timeout_reason(timeout))
    raise (TimedOutError if timed_out else UnreachableError)(message)
