"""Forwarding a REST request to the worker that must handle it (the leader, a task's owner).

As Kafka Connect's ``HerderRequestHandler``: the herder raises :class:`ForwardRequest` with the
target's URL; the first worker forwards with ``?forward=true``, a second hop with
``?forward=false``, and a worker asked with ``forward=false`` that still is not the target
answers 409 instead of forwarding again (at most two hops, no loops during a rebalance). With
no known target (no leader yet) the answer is 409 at once.

A forwarded request carries the caller's ``Authorization`` header (basic auth, see
:mod:`strom.connect.rest_security`). Over https, worker-to-worker requests use the one TLS
client context of this worker process, set by :func:`use_tls` at start (one worker per
process, as Kafka's).
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from urllib.parse import urlencode

from strom.connect.herder import RestError

NO_LEADER = ("Cannot complete request momentarily due to no known leader URL, likely because "
             "a rebalance was underway.")
TOO_MANY_HOPS = ("Cannot complete request because of a conflicting operation (e.g. worker "
                 "rebalance)")
REBALANCE = ("Cannot complete request momentarily due to stale configuration (typically caused "
             "by a concurrent config change)")


_tls: ssl.SSLContext | None = None


def use_tls(context: ssl.SSLContext | None) -> None:
    """The TLS client context for requests to other workers (None: plain http)."""
    global _tls
    _tls = context


def worker_url(worker_id: str) -> str:
    """The base URL of the worker ``host:port`` (workers of one group share a scheme)."""
    return f"{'https' if _tls is not None else 'http'}://{worker_id}"


class ForwardRequest(RestError):
    """This worker cannot handle the request; ``url`` can (None: nobody known yet)."""

    def __init__(self, url: str | None, reason: str) -> None:
        super().__init__(409, NO_LEADER if url is None else reason)
        self.url = url


def forward(target: ForwardRequest, method: str, path: str, query: list[tuple[str, str]],
            body: bytes, timeout: float = 90.0, authorization: str | None = None
            ) -> tuple[int, bytes]:
    """Send the request on to ``target.url``; (status, body) of its answer."""
    flag = dict(query).get("forward")
    if target.url is None:
        raise RestError(409, NO_LEADER)
    if flag == "false":
        raise RestError(409, TOO_MANY_HOPS)
    params = [(k, v) for k, v in query if k != "forward"]
    params.append(("forward", "true" if flag is None else "false"))
    url = target.url.rstrip("/") + path + "?" + urlencode(params)
    headers = {"Content-Type": "application/json"}
    if authorization:
        headers["Authorization"] = authorization
    req = urllib.request.Request(url, data=body or None, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=_tls) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError as exc:
        raise RestError(500, f"IO Error trying to forward REST request: {exc}") from None


def post_json(url: str, doc: object, timeout: float = 30.0, method: str = "POST") -> int:
    """POST (or ``method``) a JSON document (worker to worker); the status code (raises
    OSError)."""
    req = urllib.request.Request(url, data=json.dumps(doc).encode(), method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=_tls) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
