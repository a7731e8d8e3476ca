"""A request forwarded to another worker carries the caller's credentials (as Kafka's
RestClient), and the hop flag."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from strom.connect.forward import ForwardRequest, forward


class _Recorder(http.server.BaseHTTPRequestHandler):
    seen: list[tuple[str, str, str | None]] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.seen.append((self.command, self.path, self.headers.get("Authorization")))
        body = b'["a"]'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture()
def leader() -> Iterator[str]:
    _Recorder.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def test_forward_carries_the_authorization_header(leader: str) -> None:
    status, body = forward(ForwardRequest(leader, "not the leader"), "GET", "/connectors",
                           [("expand", "status")], b"", authorization="Basic YWxpY2U6cw==")
    assert (status, body) == (200, b'["a"]')
    assert _Recorder.seen == [("GET", "/connectors?expand=status&forward=true",
                               "Basic YWxpY2U6cw==")]


def test_forward_without_credentials_sends_none(leader: str) -> None:
    forward(ForwardRequest(leader, "x"), "GET", "/", [], b"")
    assert _Recorder.seen == [("GET", "/?forward=true", None)]
