"""Failed TLS handshakes of a listener (strom.broker.tls_handshake): the rate limit of their log
lines with a fake clock, then real handshakes (stdlib ssl clients on 127.0.0.1, a CA made by
the test) against a TlsAcceptor on asyncio's loop and on uvloop: each refusal is one INFO line
naming the listener, the peer and OpenSSL's reason, and one count; an abandoned connection is
one DEBUG line and no count; a good client is served afterwards, its first bytes (sent right
behind the handshake) intact."""

from __future__ import annotations

import asyncio
import logging
import re
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from strom.broker.auth_failures import OTHER_PEERS, FailureWindows, Summary
from strom.broker.tls_handshake import HandshakeFailures, TlsAcceptor
from strom.testing.tls import CertificateAuthority, TlsFiles, make_tls_files

LOGGER = "strom.broker.tls_handshake"  # an abandoned handshake's DEBUG line
FAILURES = "strom.broker.auth_failures"  # a refused one's INFO line and its summary
# an ApiVersions v3 request: what a Kafka client sends first, here in plaintext
API_VERSIONS = bytes.fromhex("00000015001200030000000100047465737400000000 00".replace(" ", ""))


def test_first_failure_of_a_pair_logged_the_rest_of_its_window_summarised() -> None:
    limiter = FailureWindows(window_s=60.0)
    assert limiter.failed("10.0.0.7", "CERTIFICATE_VERIFY_FAILED", 100.0) == ([], True)
    # the same pair within the window: counted, not logged
    for now in (101.0, 130.0, 159.9):
        assert limiter.failed("10.0.0.7", "CERTIFICATE_VERIFY_FAILED", now) == ([], False)
    # another reason, another host: logged at once
    assert limiter.failed("10.0.0.7", "WRONG_VERSION_NUMBER", 110.0) == ([], True)
    assert limiter.failed("10.0.0.8", "CERTIFICATE_VERIFY_FAILED", 111.0) == ([], True)
    assert limiter.expired(159.9) == []
    assert limiter.expired(160.0) == [Summary("10.0.0.7", "CERTIFICATE_VERIFY_FAILED", 3, 60.0)]
    # windows with nothing counted end without a summary; the pair is logged again afterwards
    assert limiter.expired(171.0) == []
    assert limiter.windows == {}
    assert limiter.failed("10.0.0.7", "CERTIFICATE_VERIFY_FAILED", 200.0) == ([], True)


def test_a_window_whose_timer_is_late_is_summarised_before_the_next_failure() -> None:
    limiter = FailureWindows(window_s=10.0)
    assert limiter.failed("h", "R", 0.0) == ([], True)
    assert limiter.failed("h", "R", 5.0) == ([], False)
    assert limiter.failed("h", "R", 10.5) == ([Summary("h", "R", 1, 10.0)], True)


def test_pairs_beyond_max_peers_share_one_summary() -> None:
    limiter = FailureWindows(window_s=60.0, max_peers=3)
    logged = [limiter.failed(f"10.0.0.{i}", "R", 0.0)[1] for i in range(10)]
    # three pairs tracked; the fourth opens the shared window (logged), the rest count in it
    assert logged == [True, True, True, True] + [False] * 6
    assert limiter.expired(60.0) == [Summary(OTHER_PEERS, "", 6, 60.0)]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("tls"))


def _server_context(files: TlsFiles, required: bool) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(files.server))
    if required:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(str(files.ca))
    return context


class Echo(asyncio.Protocol):
    """The connection a good handshake reaches: echoes what it reads."""

    made: list[Echo] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        Echo.made.append(self)

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)  # type: ignore[attr-defined]


class Listener:
    """A TlsAcceptor server on 127.0.0.1 in its own event loop (asyncio's or uvloop's), the
    clients run in a thread by :meth:`run`."""

    def __init__(self, loop_factory: Callable[[], asyncio.AbstractEventLoop],
                 context: ssl.SSLContext, window_s: float = 60.0) -> None:  # fmt: skip
        self.loop_factory = loop_factory
        self.context = context
        self.counted = 0
        self.failures = HandshakeFailures("SSL", self._count, FailureWindows(window_s=window_s))

    def _count(self) -> None:
        self.counted += 1

    def run(self, clients: Callable[[int], object], settle: float = 0.2) -> object:
        async def main() -> object:
            loop = asyncio.get_running_loop()
            server = await loop.create_server(
                lambda: TlsAcceptor(Echo, lambda: self.context, self.failures),
                "127.0.0.1", 0)  # fmt: skip
            try:
                result = await asyncio.to_thread(clients, server.sockets[0].getsockname()[1])
                await asyncio.sleep(settle)  # the broker side of the last handshake ends
                return result
            finally:
                server.close()

        with asyncio.Runner(loop_factory=self.loop_factory) as runner:
            return runner.run(main())


def _loops() -> Iterator[object]:
    yield pytest.param(asyncio.new_event_loop, id="asyncio")
    try:
        import uvloop
    except ImportError:
        return
    yield pytest.param(uvloop.new_event_loop, id="uvloop")


LOOPS = list(_loops())


def _client_context(files: TlsFiles, ca: Path | None = None,
                    cert: tuple[Path, Path] | None = None) -> ssl.SSLContext:  # fmt: skip
    context = ssl.create_default_context(cafile=str(ca or files.ca))
    if cert is not None:
        context.load_cert_chain(str(cert[0]), str(cert[1]))
    return context


def _tls_exchange(port: int, context: ssl.SSLContext, data: bytes = b"") -> bytes:
    """Handshake, send ``data`` right behind it, read back as much; :class:`RefusedAt` (the
    local port) when the handshake or the exchange fails (with TLS 1.3 a client learns that
    the broker refused its certificate only when it reads)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        local = raw.getsockname()[1]
        try:
            with context.wrap_socket(raw, server_hostname="127.0.0.1") as conn:
                conn.sendall(data)
                got = b""
                while len(got) < len(data):
                    chunk = conn.recv(65536)
                    if not chunk:
                        raise RefusedAt(local)
                    got += chunk
                return got
        except (ssl.SSLError, OSError) as exc:
            raise RefusedAt(local) from exc


class RefusedAt(Exception):
    def __init__(self, port: int) -> None:
        super().__init__(port)
        self.port = port


def _refused_port(attempt: Callable[[], object]) -> int:
    with pytest.raises(RefusedAt) as info:
        attempt()
    return info.value.port


def _lines(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name in (LOGGER, FAILURES) and r.levelno == level]  # fmt: skip


def _plaintext(port: int) -> int:
    """A Kafka client speaking plaintext to the TLS port: its ApiVersions request, at once.
    The local port (the broker closes the connection without a byte)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        raw.sendall(API_VERSIONS)
        assert raw.recv(100) == b""
        return int(raw.getsockname()[1])


@pytest.mark.parametrize("loop_factory", LOOPS)
def test_refused_handshakes_are_one_info_line_each_and_counted(
        loop_factory: Callable[[], asyncio.AbstractEventLoop], files: TlsFiles, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:  # fmt: skip
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    caplog.set_level(logging.DEBUG, logger=FAILURES)
    other_ca = CertificateAuthority("CN=another CA").write_pem(tmp_path / "other-ca.pem")
    listener = Listener(loop_factory, _server_context(files, required=True))
    rogue = CertificateAuthority("CN=rogue CA").issue("CN=mallory", hosts=())
    rogue.write_cert_and_key(tmp_path / "m.crt", tmp_path / "m.key")
    expired = files.authority.issue("CN=old", hosts=(), expired=True)
    expired.write_cert_and_key(tmp_path / "old.crt", tmp_path / "old.key")
    mtls = (files.client_cert, files.client_key)

    def clients(port: int) -> dict[str, object]:
        ports: dict[str, object] = {"plaintext": _plaintext(port)}
        ports["unknown ca"] = _refused_port(
            lambda: _tls_exchange(port, _client_context(files, other_ca, mtls), b"x"))
        ports["no certificate"] = _refused_port(
            lambda: _tls_exchange(port, _client_context(files), b"x"))
        ports["rogue"] = _refused_port(lambda: _tls_exchange(
            port, _client_context(files, cert=(tmp_path / "m.crt", tmp_path / "m.key")), b"x"))
        ports["expired"] = _refused_port(lambda: _tls_exchange(
            port, _client_context(files, cert=(tmp_path / "old.crt", tmp_path / "old.key")),
            b"x"))  # fmt: skip
        # the listener still serves: the request sent right behind the handshake comes back
        ports["served"] = _tls_exchange(port, _client_context(files, cert=mtls), API_VERSIONS)
        return ports

    Echo.made.clear()
    ports = listener.run(clients)
    assert isinstance(ports, dict)
    assert ports["served"] == API_VERSIONS
    assert len(Echo.made) == 1  # only the good handshake reached a connection
    lines = _lines(caplog, logging.INFO)
    expected = [
        ("plaintext", "WRONG_VERSION_NUMBER"),
        ("unknown ca", "TLSV1_ALERT_UNKNOWN_CA"),
        ("no certificate", "PEER_DID_NOT_RETURN_A_CERTIFICATE"),
        # (OpenSSL 1.1 wrote "self signed")
        ("rogue", "CERTIFICATE_VERIFY_FAILED, self.signed certificate in certificate chain"),
        ("expired", "CERTIFICATE_VERIFY_FAILED, certificate has expired"),
    ]
    assert len(lines) == len(expected), lines
    for line, (case, reason) in zip(lines, expected, strict=True):
        assert re.fullmatch(re.escape(f"failed authentication with 127.0.0.1:{ports[case]} "
                                      "(listener SSL): SSL handshake failed: ") + reason,
                            line), line  # fmt: skip
    assert listener.counted == 5
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize("loop_factory", LOOPS)
def test_abandoned_connection_is_debug_only_and_not_counted(
        loop_factory: Callable[[], asyncio.AbstractEventLoop], files: TlsFiles,
        caplog: pytest.LogCaptureFixture) -> None:  # fmt: skip
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    caplog.set_level(logging.DEBUG, logger=FAILURES)
    listener = Listener(loop_factory, _server_context(files, required=False))

    def clients(port: int) -> tuple[int, bytes]:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:  # a TCP check
            local = int(raw.getsockname()[1])
        return local, _tls_exchange(port, _client_context(files), b"after")

    result = listener.run(clients)
    assert isinstance(result, tuple)
    local, served = result
    assert served == b"after"
    assert _lines(caplog, logging.INFO) == []
    debug = _lines(caplog, logging.DEBUG)
    assert len(debug) == 1, debug
    assert debug[0].startswith(f"TLS handshake with 127.0.0.1:{local} on listener SSL abandoned: ")
    assert listener.counted == 0


@pytest.mark.parametrize("loop_factory", LOOPS)
def test_a_burst_of_failures_is_one_line_then_one_summary(
        loop_factory: Callable[[], asyncio.AbstractEventLoop], files: TlsFiles,
        caplog: pytest.LogCaptureFixture) -> None:  # fmt: skip
    caplog.set_level(logging.INFO, logger=FAILURES)
    window = 2.0
    listener = Listener(loop_factory, _server_context(files, required=False), window_s=window)

    def clients(port: int) -> list[int]:
        start = time.monotonic()
        ports = [_plaintext(port) for _ in range(10)]
        assert time.monotonic() - start < window  # all within one window
        return ports

    ports = listener.run(clients, settle=window + 0.5)
    assert isinstance(ports, list)
    assert _lines(caplog, logging.INFO) == [
        f"failed authentication with 127.0.0.1:{ports[0]} (listener SSL): SSL handshake "
        "failed: WRONG_VERSION_NUMBER",
        "failed authentication with 127.0.0.1 (listener SSL), 9 more time(s) in the 2 s after "
        "the one logged: SSL handshake failed: WRONG_VERSION_NUMBER",
    ]
    assert listener.counted == 10
