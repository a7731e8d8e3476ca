"""Kafka Connect's REST API as a client sees it (any worker: strom's or Kafka's).

An error from the worker is its ``message`` on one line (a :class:`RefusedError` with the
HTTP status); an unreachable worker is an :class:`UnreachableError`.

A worker with a login (Kafka Connect's basic auth extension, :mod:`strom.connect.rest_security`)
is reached with the credentials in the URL, ``https://alice:secret@connect:8443``: they are sent
as an ``Authorization: Basic`` header and never shown (messages name the URL without them).
An ``https`` worker's certificate is checked against the system's CAs, or the file
``SSL_CERT_FILE`` names (OpenSSL's variable).
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from strom.admin.errors import RefusedError, UnreachableError

DEFAULT_URL = "http://127.0.0.1:8083"
TIMEOUT_S = 30.0


class ConnectRest:
    """One worker's REST API at ``url``."""

    def __init__(self, url: str = DEFAULT_URL, timeout: float = TIMEOUT_S) -> None:
        parts = urlsplit(url.rstrip("/"))
        self.authorization: str | None = None
        if parts.username is not None:
            user, password = unquote(parts.username), unquote(parts.password or "")
            token = base64.b64encode(f"{user}:{password}".encode()).decode()
            self.authorization = f"Basic {token}"
            host = parts.hostname or ""
            netloc = (f"[{host}]" if ":" in host else host) + (
                f":{parts.port}" if parts.port else "")
            parts = parts._replace(netloc=netloc)
        self.url = urlunsplit(parts)
        self.timeout = timeout

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """The decoded JSON answer of ``method path`` (None for an empty one)."""
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.authorization is not None:
            headers["Authorization"] = self.authorization
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            try:
                message = json.loads(exc.read()).get("message") or exc.reason
            except (ValueError, AttributeError):
                message = exc.reason
            # Kafka's invalid-config message lists one error per line: keep it to one line.
            flat = " ".join(str(message).split("\n"))
            raise RefusedError(f"{flat} (HTTP {exc.code})") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise UnreachableError(
                f"cannot reach the Connect worker at {self.url}: {reason}"
            ) from None
        return json.loads(raw) if raw else None

    @staticmethod
    def path(name: str) -> str:
        """``/connectors/NAME`` with NAME escaped (connector names may hold ``/``)."""
        return f"/connectors/{quote(name, safe='')}"
