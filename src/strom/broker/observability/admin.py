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
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from strom.broker.observability.collector import render
from strom.config import ConfigError

if TYPE_CHECKING:
    from strom.broker.observability.health import ObservedBroker

log = logging.getLogger(__name__)
CONFIG_KEY = "strom.admin.listener"
DEFAULT = "127.0.0.1:9644"
#: what to do about a busy admin listener port
HINT = "choose another with --admin-listener HOST:PORT, or turn it off with --admin-listener="


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


def build_app(broker: ObservedBroker) -> Any:
    """The Starlette app of the admin listener."""
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

    return Starlette(routes=[
        Route("/metrics", metrics),
        Route("/health/live", live),
        Route("/health/ready", ready),
    ])  # fmt: skip


def warn_off(exc: ConfigError) -> None:
    """The one WARNING of a broker that starts without its (default) admin listener."""
    log.warning("admin listener off (no /metrics, /health): %s; %s", exc, HINT)


class AdminListener:
    """The uvicorn server of one broker, as a task of its event loop. ``required``: the
    address was asked for, so a busy port is an error (otherwise a warning, and no listener)."""

    def __init__(self, broker: ObservedBroker, host: str, port: int, required: bool = True
                 ) -> None:  # fmt: skip
        self.broker = broker
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
        config = uvicorn.Config(build_app(self.broker), log_config=None, log_level="warning",
                                access_log=False, lifespan="off", timeout_graceful_shutdown=2)
        self._server = _Server(config)
        self._task = asyncio.get_running_loop().create_task(self._server.serve([self._sock]))
        while not self._server.started and not self._task.done():
            await asyncio.sleep(0)
        if self._task.done():
            self._task.result()  # raises what stopped it
            raise RuntimeError("the admin listener stopped at start")
        log.info("admin listener on http://%s:%s (/metrics, /health/live, /health/ready)",
                 self.host, self.port)  # fmt: skip

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
