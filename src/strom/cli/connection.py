"""Where the CLI connects, and a fast, specific check that it can.

The broker address comes from, first found wins: ``-b/--bootstrap-server`` (before or after
the subcommand), the ``STROM_BROKERS`` environment variable, the current profile
(:mod:`strom.cli.profile`), then ``localhost:9092``.

librdkafka reports every connection problem as "Broker transport failure" after its own
timeouts, so before building a client :func:`preflight` checks each address itself:
malformed (no port, bad port), unknown host (DNS), refused, or no answer within ``--timeout``.
It succeeds as soon as one address accepts a TCP connection, and reports the first address's
reason otherwise: one line, as soon as it is known.
"""

from __future__ import annotations

import argparse
import os
import socket
import time
from dataclasses import dataclass

from strom.cli.errors import CliError, timeout

DEFAULT_BOOTSTRAP = "localhost:9092"
ENV_BROKERS = "STROM_BROKERS"


@dataclass(frozen=True)
class Address:
    """One ``host:port`` of a bootstrap list (IPv6 literals in brackets)."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_addresses(bootstrap: str) -> list[Address]:
    """A comma-separated ``host:port`` list; a :class:`CliError` naming a malformed entry."""
    entries = [e.strip() for e in bootstrap.split(",") if e.strip()]
    if not entries:
        raise CliError("malformed broker address '': expected HOST:PORT")
    result = []
    for entry in entries:
        text = entry.split("://", 1)[1] if "://" in entry else entry  # PLAINTEXT://h:p
        host, sep, port = text.rpartition(":")
        host = host.strip("[]")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise CliError(
                f"malformed broker address {entry!r}: expected HOST:PORT (e.g. localhost:9092)"
            )
        result.append(Address(host, int(port)))
    return result


def resolve_bootstrap(args: argparse.Namespace) -> str:
    """The bootstrap list to use, recording where it came from on ``args``."""
    given = getattr(args, "bootstrap_server", None)
    if given and getattr(args, "bootstrap_source", None):
        return str(given)  # resolved already
    if given:
        args.bootstrap_source = "--bootstrap-server"
        return str(given)
    env = os.environ.get(ENV_BROKERS, "").strip()
    if env:
        args.bootstrap_source = ENV_BROKERS
        return env
    from strom.cli.profile import current_profile

    profile = current_profile(getattr(args, "profile", None))
    if profile is not None and profile.brokers:
        args.bootstrap_source = f"profile {profile.name!r}"
        return profile.brokers
    args.bootstrap_source = "default"
    return DEFAULT_BOOTSTRAP


def _probe(address: Address, deadline: float) -> str | None:
    """None if ``address`` accepts a TCP connection before ``deadline``, else the reason."""
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
                reason = f"no answer within {timeout():g} s"
            except OSError as exc:
                reason = exc.strerror or str(exc)
    if deadline - time.monotonic() <= 0 and reason == "no address":
        reason = f"no answer within {timeout():g} s"
    return reason


def preflight(bootstrap: str) -> None:
    """Raise a :class:`CliError` unless some address of ``bootstrap`` accepts connections."""
    addresses = parse_addresses(bootstrap)
    deadline = time.monotonic() + timeout()
    reasons = []
    for address in addresses:
        reason = _probe(address, deadline)
        if reason is None:
            return
        reasons.append(f"{address}: {reason}")
    raise CliError(f"cannot connect to the broker at {reasons[0]}" + (
        f" (and {len(reasons) - 1} more address(es) failed)" if len(reasons) > 1 else ""
    ))
