"""The console's login: users from a file of scrypt hashes, a signed session cookie, CSRF
tokens on every change, logout.

With ``strom console --users-file FILE`` (see :mod:`strom.security.passwords` for the file)
every page but ``/login`` and ``/static/`` needs a signed-in user:

- ``POST /login`` checks the name and password; on success the session gets a fresh random id
  (kept in this process's table of live sessions, so ``POST /logout`` ends it for good even if
  someone kept a copy of the cookie) and a fresh CSRF token. A failed login is logged once with
  the name and the client address, and answered 401 with the form again.
- The session cookie is Starlette's ``SessionMiddleware`` one: signed (itsdangerous, with a
  secret drawn at start, so a restart signs everyone out), ``HttpOnly``, ``SameSite=Lax``,
  ``Secure`` when the console serves HTTPS, valid 8 hours at most.
- Every request that is not a GET/HEAD must carry the session's CSRF token, as the form field
  ``csrf_token`` (every form of the templates has it) or the header ``X-CSRF-Token``, else it
  is refused with 403 before any handler runs. ``/login`` itself is covered (a token set in
  the session when the form is shown), so another site cannot sign a browser in either.
- A GET without a session is sent to ``/login?next=<path>`` (303); anything else gets 401.

Without ``--users-file`` the console has no login, as before: it listens on 127.0.0.1 unless
told otherwise and says so at start; cross-site POSTs are still refused by the ``Origin`` check
(:class:`strom.console.app.WriteGuard`).
"""

from __future__ import annotations

import logging
import secrets
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, quote, urlsplit

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from strom.security.passwords import PasswordFile

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

LOG = logging.getLogger("strom.console.auth")
SESSION_COOKIE = "strom_console_session"
MAX_AGE = 8 * 3600
CSRF_FIELD, CSRF_HEADER = "csrf_token", b"x-csrf-token"
PUBLIC = ("/login", "/static/")
SAFE_METHODS = ("GET", "HEAD")
#: a request body read to find the CSRF token is at most this big (the console's forms are
#: small; produce's value field is bounded by the broker's message size anyway)
MAX_FORM_BYTES = 8 * 1024 * 1024


@dataclass
class Login:
    """The console's users and its live sessions (session id -> (user, expiry))."""

    users: PasswordFile
    sessions: dict[str, tuple[str, float]] = field(default_factory=dict)
    secret: str = field(default_factory=lambda: secrets.token_urlsafe(32))

    def start_session(self, user: str) -> str:
        now = time.monotonic()
        self.sessions = {k: v for k, v in self.sessions.items() if v[1] > now}
        sid = secrets.token_urlsafe(24)
        self.sessions[sid] = (user, now + MAX_AGE)
        return sid

    def user_of(self, session: dict[str, Any]) -> str | None:
        entry = self.sessions.get(str(session.get("sid", "")))
        if entry is None or entry[1] < time.monotonic():
            return None
        return entry[0]

    def end_session(self, session: dict[str, Any]) -> None:
        self.sessions.pop(str(session.get("sid", "")), None)


def csrf_token(session: dict[str, Any]) -> str:
    """The session's CSRF token (made on first use)."""
    token = session.get("csrf")
    if not isinstance(token, str) or not token:
        token = secrets.token_urlsafe(32)
        session["csrf"] = token
    return token


def _safe_next(value: str | None) -> str:
    """A local path to go to after login (never another site)."""
    if not value:
        return "/"
    parts = urlsplit(value)
    if parts.scheme or parts.netloc or not value.startswith("/") or value.startswith("//"):
        return "/"
    return value


class LoginGate:
    """ASGI, inside ``SessionMiddleware``: a signed-in user for every non-public path, and
    the session's CSRF token on every request that may change something (module doc)."""

    def __init__(self, app: ASGIApp, login: Login) -> None:
        self.app = app
        self.login = login

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        session = scope["session"]
        path = scope["path"]
        public = path == "/login" or path.startswith("/static/")
        user = self.login.user_of(session)
        scope.setdefault("state", {})["user"] = user
        if user is None and not public:
            if scope["method"] in SAFE_METHODS:
                target = path + ("?" + scope["query_string"].decode("latin-1")
                                 if scope["query_string"] else "")
                response: Response = RedirectResponse(f"/login?next={quote(target)}",
                                                      status_code=303)
            else:
                response = PlainTextResponse("login required", status_code=401)
            await response(scope, receive, send)
            return
        if scope["method"] not in SAFE_METHODS:
            checked = await self._check_csrf(scope, receive, send, session)
            if checked is None:
                return
            receive = checked
        await self.app(scope, receive, send)

    async def _check_csrf(self, scope: Scope, receive: Receive, send: Send,
                          session: dict[str, Any]) -> Receive | None:
        """The body-replaying ``receive`` if the token is right; None once refused."""
        expected = session.get("csrf")
        given = next((v.decode("latin-1") for k, v in scope["headers"] if k == CSRF_HEADER),
                     None)
        chunks: list[bytes] = []
        if given is None:
            size = 0
            while True:
                message = await receive()
                if message["type"] != "http.request":
                    break
                chunks.append(message.get("body", b""))
                size += len(chunks[-1])
                if size > MAX_FORM_BYTES:
                    await PlainTextResponse("request too large", status_code=413)(
                        scope, receive, send)
                    return None
                if not message.get("more_body", False):
                    break
            form = dict(parse_qsl(b"".join(chunks).decode("utf-8", errors="replace"),
                                  keep_blank_values=True))
            given = form.get(CSRF_FIELD)
        if not isinstance(expected, str) or not given or not secrets.compare_digest(
                given.encode(), expected.encode()):
            await PlainTextResponse("refused: missing or wrong CSRF token (reload the page)",
                                    status_code=403)(scope, receive, send)
            return None
        if given is not None and not chunks:
            return receive
        body = b"".join(chunks)
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return replay


def _page(request: Request, status: int = 200, **context: Any) -> Response:
    return request.app.state.console.page(  # type: ignore[no-any-return]
        request, "login.html", status=status, **context)


def routes(login: Login) -> list[Route]:
    async def login_page(request: Request) -> Response:
        session = request.session
        if request.method == "GET":
            if login.user_of(session) is not None:
                return RedirectResponse(_safe_next(request.query_params.get("next")), 303)
            return _page(request, next=_safe_next(request.query_params.get("next")),
                         csrf_token=csrf_token(session), failed=False)
        fields = dict(parse_qsl((await request.body()).decode("utf-8", errors="replace"),
                                keep_blank_values=True))
        name, password = fields.get("username", ""), fields.get("password", "")
        target = _safe_next(fields.get("next"))
        if not await run_in_threadpool(login.users.authenticate, name, password):
            client = request.client.host if request.client else "?"
            LOG.warning("console login failed for user %r from %s", name, client)
            return _page(request, status=401, next=target, csrf_token=csrf_token(session),
                         failed=True)
        session.clear()
        session["sid"] = login.start_session(name)
        session["csrf"] = secrets.token_urlsafe(32)  # a new token for the new session
        LOG.info("console login: %s from %s", name,
                 request.client.host if request.client else "?")
        return RedirectResponse(target, status_code=303)

    async def logout(request: Request) -> Response:
        login.end_session(request.session)
        request.session.clear()
        return RedirectResponse("/login", status_code=303)

    return [Route("/login", login_page, methods=["GET", "POST"]),
            Route("/logout", logout, methods=["POST"])]
