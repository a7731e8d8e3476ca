"""What the page handlers share: the console's state, page rendering, redirects, filters."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.templating import Jinja2Templates

from strom.admin.errors import InvalidInputError
from strom.console.auth import Login, csrf_token
from strom.console.cluster import Cluster
from strom.console.connectors import ConnectClient
from strom.console.throughput import ThroughputSampler

HERE = Path(__file__).parent


@dataclass
class Console:
    """What every page handler needs (``request.app.state.console``)."""

    cluster: Cluster
    templates: Jinja2Templates
    read_only: bool = False
    connect: ConnectClient | None = None
    sampler: ThroughputSampler | None = None
    login: Login | None = None  # None: no login (see strom.console.auth)

    def page(self, request: Request, template: str, /, status: int = 200,
             **context: Any) -> Response:
        if self.login is not None:  # the signed-in user and the CSRF token the forms carry
            context.setdefault("user", getattr(request.state, "user", None))
            context.setdefault("csrf_token", csrf_token(request.session))
        context.setdefault("read_only", self.read_only)
        context.setdefault("connect", self.connect is not None)
        context.setdefault("bootstrap", self.cluster.bootstrap)
        return self.templates.TemplateResponse(request, template, context, status_code=status)


def console(request: Request) -> Console:
    return request.app.state.console  # type: ignore[no-any-return]


def redirect(path: str, **params: Any) -> RedirectResponse:
    """303 to ``path`` (after a POST), with a one-line notice as ``?ok=...``."""
    query = urlencode({k: v for k, v in params.items() if v is not None})
    return RedirectResponse(f"{path}?{query}" if query else path, status_code=303)


def _human_bytes(value: int | None) -> str:
    if value is None or value < 0:
        return "-"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{value} B"


def _thousands(value: int | float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if isinstance(value, float) else f"{value:,}"


def templates() -> Jinja2Templates:
    t = Jinja2Templates(directory=str(HERE / "templates"))
    t.env.filters["bytes"] = _human_bytes
    t.env.filters["thousands"] = _thousands
    return t


async def form(request: Request) -> dict[str, str]:
    """The urlencoded body of a POST (the console's forms; no multipart parser needed).
    The console's forms send each field once; a repeated one keeps its last value."""
    body = (await request.body()).decode("utf-8", errors="replace")
    return dict(parse_qsl(body, keep_blank_values=True))


def optional_int(value: str | None, what: str) -> int | None:
    """A form field as an int, or None when it was left empty."""
    if value is None or not value.strip():
        return None
    try:
        return int(value)
    except ValueError:
        raise InvalidInputError(f"invalid {what} {value!r}: expected an integer") from None
