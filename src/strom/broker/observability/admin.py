"""The admin listener: ``/metrics``, ``/health/live``, ``/health/ready`` over HTTP.

Configured by the broker property ``strom.admin.listener`` (``HOST:PORT``, default
``127.0.0.1:9644``; an empty value turns it off) or ``strom serve --admin-listener``. Served
by uvicorn with a Starlette app (the project's one ASGI stack, as Connect's REST API) inside
the broker's own event loop: ``Server.serve()`` runs as a task, so a scrape reads the broker's
state between two requests without locks. Endpoints are ``async`` on purpose: Starlette would
run plain functions in a thread, beside the loop that mutates what they read.

The socket is bound by the broker, before the logs load, and ``/health/live`` answers (and
``/health/ready`` says 503) as soon as the loop is free during start-up. A port in use is one
readable line (uvicorn would call ``sys.exit``): a start-up error when the listener was asked
for (``--admin-listener``, ``--set`` or ``--config``), and with the default address only a
WARNING naming ``--admin-listener``: the broker starts without it (``pip install . && strom
serve`` must not fail because something else holds 127.0.0.1:9644). uvicorn's own signal
handlers are not installed: the broker's SIGTERM/SIGINT handling stays in charge.

Security (:class:`AdminSecurity`), off by default (the listener stays on 127.0.0.1 and says
at start that it has no login): ``strom.admin.listener.ssl.*`` with Kafka's ``ssl.*`` names
after the prefix (``...ssl.keystore.location`` set: HTTPS; ``...ssl.client.auth=required``:
client certificates, see :mod:`strom.security.web_tls`), and
``strom.admin.listener.token.file``: a file whose one line is the bearer token ``/metrics`` and
``/health/ready`` then require (``Authorization: Bearer <token>``, compared in constant time;
401 without it). ``/health/live`` says only "live" and stays open for probes.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import socket
import ssl
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strom.broker.observability.collector import render
from strom.config import ConfigError
from strom.security.web_tls import TlsConfigError, serve_with, server_context

if TYPE_CHECKING:
    from strom.broker.observability.health import ObservedBroker

log = logging.getLogger(__name__)
CONFIG_KEY = "strom.admin.listener"
DEFAULT = "127.0.0.1:9644"
#: what to do about a busy admin listener port
HINT = "choose another with --admin-listener HOST:PORT, or turn it off with --admin-listener="


SSL_PREFIX = CONFIG_KEY + ".ssl."
TOKEN_FILE_KEY = CONFIG_KEY + ".token.file"
#: the endpoints a token guards (liveness says nothing but "live": probes reach it freely)
GUARDED = ("/metrics", "/health/ready")


@dataclass(frozen=True)
class AdminSecurity:
    """TLS and the bearer token of the admin listener (both None: plain, open)."""

    tls: ssl.SSLContext | None = None
    token: str | None = None

    @classmethod
    def from_config(cls, get: Callable[[str], str | None], keys: list[str]) -> AdminSecurity:
        """From the broker's properties (``get``; ``keys``: every key the config holds)."""
        tls_conf = {"ssl." + k[len(SSL_PREFIX):]: get(k) or "" for k in keys
                    if k.startswith(SSL_PREFIX)}
        tls = None
        if any(tls_conf.values()):
            try:
                tls = server_context(tls_conf, "admin")
            except TlsConfigError as exc:
                raise ConfigError(f"{CONFIG_KEY}: {exc} (as {SSL_PREFIX}*)") from None
        token = None
        path = (get(TOKEN_FILE_KEY) or "").strip()
        if path:
            try:
                token = Path(path).read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise ConfigError(f"{TOKEN_FILE_KEY}: cannot read {path}: "
                                  f"{exc.strerror or exc}") from None
            if len(token) < 16:
                raise ConfigError(f"{TOKEN_FILE_KEY}: the token in {path} is shorter than 16 "
                                  f"characters")
        return cls(tls, token)

    def describe(self) -> str:
        parts = []
        if self.token is not None:
            parts.append("bearer token")
        if self.tls is not None and self.tls.verify_mode == ssl.CERT_REQUIRED:
            parts.append("client certificates")
        return " + ".join(parts) if parts else "no login"


class BearerToken:
    """ASGI: 401 on the guarded paths unless ``Authorization: Bearer <token>`` is right."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.token = token.encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] in GUARDED:
            given = b""
            for key, value in scope["headers"]:
                if key == b"authorization" and value[:7].lower() == b"bearer ":
                    given = value[7:].strip()
            if not hmac.compare_digest(given, self.token):
                from starlette.responses import PlainTextResponse

                await PlainTextResponse("a bearer token is required", status_code=401,
                                        headers={"WWW-Authenticate": "Bearer"})(
                    scope, receive, send)
                return
        await self.app(scope, receive, send)


def missing_packages() -> list[str]:
    """The packages the admin listener needs that are not installed."""
    import importlib.util

    modules = {"prometheus-client": "prometheus_client", "starlette": "starlette",
               "uvicorn": "uvicorn"}  # fmt: skip
    return [name for name, module in modules.items() if importlib.util.find_spec(module) is None]


def parse_listener(value: str) -> tuple[str, int] | None:
    """``HOST:PORT`` -> (host, port); empty -> None (off). Raises :class:`ConfigError`."""
    value = value.strip()
    if not value:
        return None
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ConfigError(f"{CONFIG_KEY} expects HOST:PORT or an empty value, got {value!r}")
    return (host or "0.0.0.0").strip("[]"), int(port)


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (ConfigError naming the address if it fails)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ConfigError(f"{CONFIG_KEY} {host}:{port}: cannot resolve {host!r} "
                          f"({exc.strerror})") from None  # fmt: skip
    family, kind, proto, _name, addr = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(128)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {CONFIG_KEY} {host}:{port}: "
                          f"{exc.strerror or exc}") from None  # fmt: skip
    return sock


def build_app(broker: ObservedBroker, token: str | None = None) -> Any:
    """The Starlette app of the admin listener (``token``: required on :data:`GUARDED`)."""
    from prometheus_client import (
        CONTENT_TYPE_LATEST,
        CollectorRegistry,
        PlatformCollector,
        ProcessCollector,
        generate_latest,
    )
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    process = CollectorRegistry(auto_describe=False)
    ProcessCollector(registry=process)  # process_cpu_seconds_total, RSS, open fds …
    PlatformCollector(registry=process)

    async def metrics(request: Request) -> Response:
        body = render(broker).encode() + generate_latest(process)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    async def live(request: Request) -> Response:
        return JSONResponse({"status": "live"})

    async def ready(request: Request) -> Response:
        ok, body = broker.health.readiness()
        return JSONResponse(body, status_code=200 if ok else 503)

    app = Starlette(routes=[
        Route("/metrics", metrics),
        Route("/health/live", live),
        Route("/health/ready", ready),
    ])  # fmt: skip
    if token is not None:
        app.add_middleware(BearerToken, token=token)
    return app


def warn_off(exc: ConfigError) -> None:
    """The one WARNING of a broker that starts without its (default) admin listener."""
    log.warning("admin listener off (no /metrics, /health): %s; %s", exc, HINT)


class AdminListener:
    """The uvicorn server of one broker, as a task of its event loop. ``required``: the
    address was asked for, so a busy port is an error (otherwise a warning, and no listener)."""

    def __init__(self, broker: ObservedBroker, host: str, port: int, required: bool = True,
                 security: AdminSecurity | None = None) -> None:  # fmt: skip
        self.broker = broker
        self.security = security or AdminSecurity()
        self.required = required
        self.host, self.port = host, port
        self._sock: socket.socket | None = None
        self._server: Any = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        import uvicorn

        class _Server(uvicorn.Server):
            @contextlib.contextmanager
            def capture_signals(self) -> Iterator[None]:  # the broker handles signals
                yield

        try:
            self._sock = bind(self.host, self.port)
        except ConfigError as exc:
            if self.required:
                raise ConfigError(f"{exc} ({HINT})") from None
            warn_off(exc)  # the default address, taken: the broker goes on without it
            return
        config = uvicorn.Config(build_app(self.broker, self.security.token), log_config=None,
                                log_level="warning", access_log=False, lifespan="off",
                                timeout_graceful_shutdown=2)
        self._server = _Server(serve_with(config, self.security.tls))
        self._task = asyncio.get_running_loop().create_task(self._server.serve([self._sock]))
        while not self._server.started and not self._task.done():
            await asyncio.sleep(0)
        if self._task.done():
            self._task.result()  # raises what stopped it
            raise RuntimeError("the admin listener stopped at start")
        log.info("admin listener on %s://%s:%s (/metrics, /health/live, /health/ready): %s",
                 "https" if self.security.tls else "http", self.host, self.port,
                 self.security.describe())  # fmt: skip

    async def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._task is not None:
            try:
                await asyncio.wait_for(self._task, 5)
            except (TimeoutError, asyncio.CancelledError):
                pass
            except Exception:
                log.exception("admin listener stopped with an error")
            self._task = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None
