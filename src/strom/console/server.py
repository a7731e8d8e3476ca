"""``strom console``: check the broker and the listen address, then serve the console.

The broker is asked once before serving (an unreachable address is one line and exit 1, as
every ``strom`` client command); afterwards a broker that goes away shows as an error on the
page and the console recovers when it is back. uvicorn re-raises the signal that stopped it;
no-op handlers make that a clean exit 0 once the app's shutdown (sampler stop, producer
flush) has run.
"""

from __future__ import annotations

import argparse
import ipaddress
import signal
import socket
import sys
import threading
import time
import webbrowser

import uvicorn

from strom.admin.errors import InvalidInputError
from strom.console.app import build_app
from strom.console.auth import Login
from strom.console.cluster import Cluster
from strom.security.passwords import PasswordFile, PasswordFileError
from strom.security.web_tls import TlsConfigError, serve_with, server_context

DEFAULT_LISTEN = "127.0.0.1:8080"


def parse_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT``, ``:PORT`` or ``PORT`` (host 127.0.0.1); IPv6 as ``[::1]:8080``."""
    host, sep, port = value.rpartition(":")
    if not sep:
        host, port = "", value
    host = host.strip("[]") or "127.0.0.1"
    try:
        number = int(port)
    except ValueError:
        raise InvalidInputError(f"invalid --listen {value!r}: expected HOST:PORT") from None
    if not 0 <= number <= 65535:
        raise InvalidInputError(f"invalid --listen {value!r}: port out of range")
    return host, number


def _check_bindable(host: str, port: int) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise InvalidInputError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def _open_when_started(server: uvicorn.Server, url: str) -> None:
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline and not server.should_exit:
        time.sleep(0.05)
    if server.started and not webbrowser.open(url):
        print(f"strom console: no web browser found; open {url} yourself", file=sys.stderr,
              flush=True)


def _ssl_settings(items: list[str]) -> dict[str, str]:
    conf: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip().startswith("ssl."):
            raise InvalidInputError(f"invalid --ssl {item!r}: expected ssl.KEY=VALUE")
        conf[key.strip()] = value
    return conf


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve(args: argparse.Namespace) -> int:
    host, port = parse_listen(args.listen)
    login = None
    if args.users_file:
        try:
            login = Login(PasswordFile.load(args.users_file))
        except PasswordFileError as exc:
            raise InvalidInputError(str(exc)) from None
    tls = None
    if args.ssl:
        try:
            tls = server_context(_ssl_settings(args.ssl), "console")
        except TlsConfigError as exc:
            raise InvalidInputError(f"--ssl: {exc}") from None
    _check_bindable(host, port)
    cluster = Cluster(args.bootstrap_server, client_config=list(args.client_config or []),
                      timeout=args.timeout, checked=False)
    cluster.session.check()  # preflight and metadata: one line if the broker does not answer
    app = build_app(cluster, read_only=args.read_only, connect_url=args.connect_url,
                    sample_interval=args.sample_interval, login=login, https=tls is not None)
    server = uvicorn.Server(serve_with(uvicorn.Config(app, host=host, port=port,
                                                      log_level="warning", access_log=False),
                                       tls))
    shown = f"[{host}]" if ":" in host else host
    url = f"{'https' if tls else 'http'}://{shown}:{port}/"
    mode = ", read-only" if args.read_only else ""
    print(f"strom console on {url} (brokers {args.bootstrap_server}{mode})", flush=True)
    if login is not None:
        print(f"login required: {len(login.users.users)} user(s) from {args.users_file}",
              flush=True)
    elif _loopback(host):
        print(f"no login (--users-file not given): only this machine can reach {url}",
              flush=True)
    else:
        print(f"WARNING: no login (--users-file not given) and {host} is not a loopback "
              f"address: anyone who can reach {url} can change the cluster", flush=True)
    if args.open:
        threading.Thread(target=_open_when_started, args=(server, url), daemon=True).start()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    server.run()
    sys.stdout.flush()
    return 0
