"""The console's ASGI application: Starlette, Jinja2 pages, local static assets.

Pages are rendered on the server; ``static/`` holds the only CSS and script (no CDN, so the
console works with the network cut). Page handlers are plain functions: Starlette runs them in
its thread pool, where the blocking confluent-kafka calls belong.

Invariants:

- Every change is a POST (forms); reads are GETs. With ``read_only`` the templates show no
  write control and :class:`WriteGuard` answers every other method with 403, whatever the
  client sends.
- A POST whose ``Origin`` is not this console is refused (403): another web page open in the
  same browser cannot submit the console's forms. With a login (``login``), every page needs a
  signed-in user and every change the session's CSRF token (:mod:`strom.console.auth`).
- An :class:`~strom.admin.errors.AdminError` (an unreachable broker, a refused request, bad input)
  becomes a page with its one-line message, status 400; never a traceback.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

from confluent_kafka import KafkaException
from starlette.applications import Starlette
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from strom.admin.errors import AdminError, describe_kafka_error
from strom.console import auth, routes_acls, routes_groups, routes_shares, routes_topics
from strom.console.auth import Login
from strom.console.cluster import Cluster
from strom.console.connectors import ConnectClient
from strom.console.throughput import ThroughputSampler
from strom.console.web import HERE, Console, console, templates

SAFE_METHODS = ("GET", "HEAD")


class WriteGuard:
    """Refuses writes in read-only mode, and cross-origin writes always (see module doc)."""

    def __init__(self, app: ASGIApp, read_only: bool) -> None:
        self.app = app
        self.read_only = read_only

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] not in SAFE_METHODS:
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
            reason = None
            if self.read_only:
                reason = "strom console is read-only: changes are disabled"
            elif "origin" in headers and urlsplit(headers["origin"]).netloc != headers.get(
                "host"
            ):
                reason = "refused: the request comes from another site"
            if reason is not None:
                await PlainTextResponse(reason, status_code=403)(scope, receive, send)
                return
        await self.app(scope, receive, send)


async def _error_page(request: Request, exc: Exception) -> Response:
    if isinstance(exc, AdminError):
        message = exc.message
    elif isinstance(exc, KafkaException):
        message = describe_kafka_error(exc)
    else:
        message = f"{type(exc).__name__}: {exc}"
    return console(request).page(request, "error.html", status=400, message=message,
                                 back=request.headers.get("referer") or "/")


def build_app(cluster: Cluster, *, read_only: bool = False, connect_url: str | None = None,
              sample_interval: float = 5.0, sample: bool = True, login: Login | None = None,
              https: bool = False) -> Starlette:
    """The console for ``cluster``; with ``sample`` a throughput sampler runs while served;
    with ``login`` users must sign in (``https``: the session cookie is ``Secure``)."""
    state = Console(
        cluster=cluster,
        templates=templates(),
        read_only=read_only,
        connect=ConnectClient(connect_url) if connect_url else None,
        login=login,
    )
    if sample:
        state.sampler = ThroughputSampler(lambda: total_end_offset(cluster), sample_interval)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if state.sampler is not None:
            state.sampler.start()
        try:
            yield
        finally:
            if state.sampler is not None:
                state.sampler.stop()
            cluster.close()

    routes = [
        *(auth.routes(login) if login is not None else []),
        *routes_topics.routes(),
        *routes_groups.routes(),
        *routes_shares.routes(),
        *routes_acls.routes(),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    app = Starlette(routes=routes, lifespan=lifespan,
                    exception_handlers={AdminError: _error_page, KafkaException: _error_page})
    app.state.console = state
    app.add_middleware(WriteGuard, read_only=read_only)
    if login is not None:  # added last = outermost: the session, then the gate, then the guard
        app.add_middleware(auth.LoginGate, login=login)
        app.add_middleware(SessionMiddleware, secret_key=login.secret,
                           session_cookie=auth.SESSION_COOKIE, max_age=auth.MAX_AGE,
                           same_site="lax", https_only=https)
    return app


def total_end_offset(cluster: Cluster) -> int:
    """The sum of every non-internal partition's log end offset (the sampler's reading)."""
    keys = cluster.partition_keys(cluster.topic_names(internal=False))
    return sum(cluster.end_offsets(keys).values()) if keys else 0
