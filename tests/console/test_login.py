"""The console's login against a real broker: users file, session cookie, CSRF, logout, and
a real ``strom console`` process serving HTTPS with a CA made by the test."""

from __future__ import annotations

import http.cookiejar
import re
import ssl
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from strom.console.app import build_app
from strom.console.auth import Login
from strom.console.cluster import Cluster
from strom.security.passwords import PasswordFile, set_user
from strom.testing.tls import CertificateAuthority
from tests.console.helpers import ConsoleProcess, admin, topic_exists

BASE = "http://127.0.0.1"


def token(html: str) -> str:
    m = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert m, html[:500]
    return m.group(1)


@pytest.fixture(scope="module")
def users(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("users") / "console-users"
    set_user(path, "alice", "wonderland")
    set_user(path, "bob", "builder")
    return path


@pytest.fixture()
def client(broker: Any, users: Path) -> Iterator[TestClient]:
    app = build_app(Cluster(broker.bootstrap), sample=False,
                    login=Login(PasswordFile.load(users)))
    with TestClient(app, base_url=BASE) as c:
        yield c


def log_in(client: TestClient, user: str = "alice", password: str = "wonderland") -> Any:
    page = client.get("/login")
    return client.post("/login", data={"username": user, "password": password,
                                       "csrf_token": token(page.text), "next": "/topics"},
                       follow_redirects=False)


def test_users_file_holds_hashes_only(users: Path) -> None:
    text = users.read_text()
    assert "wonderland" not in text and "builder" not in text
    assert re.fullmatch(r"(\w+:\$scrypt\$ln=15,r=8,p=1\$\S+\$\S+\n){2}", text), text
    assert users.stat().st_mode & 0o077 == 0


def test_pages_need_a_login(client: TestClient) -> None:
    r = client.get("/topics?x=1", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/login?next=/topics%3Fx%3D1"
    assert client.post("/topics", data={"name": "t"}, follow_redirects=False).status_code == 401
    assert client.get("/static/console.css").status_code == 200
    login = client.get("/login")
    assert login.status_code == 200 and 'id="login"' in login.text


def test_wrong_password_unknown_user_and_missing_csrf(client: TestClient) -> None:
    for user, password in (("alice", "nope"), ("mallory", "wonderland"), ("", "")):
        r = log_in(client, user, password)
        assert r.status_code == 401 and 'id="login-failed"' in r.text
        assert client.get("/topics", follow_redirects=False).status_code == 303
    # the right password without the form's token (a login forged by another site): refused
    r = client.post("/login", data={"username": "alice", "password": "wonderland"},
                    follow_redirects=False)
    assert r.status_code == 403
    assert client.get("/topics", follow_redirects=False).status_code == 303


def test_session_cookie_csrf_and_logout(client: TestClient, broker: Any,
                                        topic_name: str) -> None:
    r = log_in(client)
    assert r.status_code == 303 and r.headers["location"] == "/topics"
    cookie = r.headers["set-cookie"]
    assert cookie.startswith("strom_console_session=")
    assert "httponly" in cookie.lower() and "samesite=lax" in cookie.lower()
    page = client.get("/new-topic")
    assert page.status_code == 200 and 'id="user">alice<' in page.text
    csrf = token(page.text)
    # a change without the token, or with another one, is refused and changes nothing
    for data in ({"name": topic_name, "partitions": "1"},
                 {"name": topic_name, "partitions": "1", "csrf_token": "forged"}):
        r = client.post("/topics", data=data, follow_redirects=False)
        assert r.status_code == 403 and "CSRF" in r.text
    assert not topic_exists(broker.bootstrap, topic_name)
    # with the token (field or header) it is done
    r = client.post("/topics", data={"name": topic_name, "partitions": "2",
                                     "replication_factor": "", "csrf_token": csrf},
                    follow_redirects=False)
    assert r.status_code == 303, r.text
    md = admin(broker.bootstrap).list_topics(topic_name, timeout=10).topics[topic_name]
    assert len(md.partitions) == 2
    # log out: the old cookie no longer works, even replayed
    old = client.cookies.get("strom_console_session")
    assert client.post("/logout", data={"csrf_token": csrf},
                       follow_redirects=False).status_code == 303
    assert client.get("/topics", follow_redirects=False).status_code == 303
    client.cookies.set("strom_console_session", old)
    assert client.get("/topics", follow_redirects=False).status_code == 303


def test_login_redirect_stays_on_this_site(client: TestClient) -> None:
    page = client.get("/login")
    r = client.post("/login", data={"username": "bob", "password": "builder",
                                    "csrf_token": token(page.text),
                                    "next": "//evil.example/x"}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/"


def test_add_user_command(tmp_path: Path) -> None:
    path = tmp_path / "users"
    for password in ("first", "second"):
        done = subprocess.run([sys.executable, "-m", "strom", "console", "--users-file",
                               str(path), "--add-user", "carol"], input=password + "\n",
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
    users = PasswordFile.load(path)
    assert list(users.users) == ["carol"]
    assert users.authenticate("carol", "second") and not users.authenticate("carol", "first")
    bad = subprocess.run([sys.executable, "-m", "strom", "console", "--users-file",
                          str(tmp_path / "none"), "-b", "127.0.0.1:1"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "Traceback" not in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1, bad.stderr


def test_real_console_over_https_with_login(broker: Any, users: Path, tmp_path: Path,
                                            topic_name: str) -> None:
    ca = CertificateAuthority()
    keystore = ca.issue("CN=console", hosts=("127.0.0.1",)).write_pem(tmp_path / "console.pem")
    ca_file = ca.write_pem(tmp_path / "ca.pem")
    console = ConsoleProcess(tmp_path, broker.bootstrap, [
        "--users-file", str(users), "--ssl", f"ssl.keystore.location={keystore}"])
    console.start()
    try:
        context = ssl.create_default_context(cafile=str(ca_file))
        jar = http.cookiejar.CookieJar()
        opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=context),
                                             urllib.request.HTTPCookieProcessor(jar))
        url = f"https://127.0.0.1:{console.port}"

        def call(path: str, data: dict[str, str] | None = None) -> tuple[int, str]:
            body = urllib.parse.urlencode(data).encode() if data is not None else None
            try:
                with opener.open(url + path, data=body, timeout=30) as resp:
                    return resp.status, resp.read().decode()
            except urllib.error.HTTPError as exc:
                return exc.code, exc.read().decode()

        status, page = call("/topics")  # redirected to the login form
        assert status == 200 and 'id="login"' in page
        status, page = call("/login", {"username": "alice", "password": "wonderland",
                                       "csrf_token": token(page), "next": "/new-topic"})
        assert status == 200 and 'id="user">alice<' in page
        cookie = next(c for c in jar if c.name == "strom_console_session")
        assert cookie.secure  # the session cookie only travels over TLS
        status, _ = call("/topics", {"name": topic_name, "partitions": "1",
                                     "replication_factor": "", "csrf_token": token(page)})
        assert status == 200 and topic_exists(broker.bootstrap, topic_name)
        # plain http on the https port: nothing served
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
            urllib.request.urlopen(f"http://127.0.0.1:{console.port}/", timeout=10)
        out = console.log_tail(50)
        assert f"strom console on https://127.0.0.1:{console.port}/" in out
        assert "login required: 2 user(s)" in out
    finally:
        console.stop()


def test_real_console_without_login_says_so(broker: Any, tmp_path: Path) -> None:
    console = ConsoleProcess(tmp_path, broker.bootstrap)
    console.start()
    try:
        assert console.request("GET", "/topics")[0] == 200
        assert "no login (--users-file not given): only this machine" in console.log_tail(50)
    finally:
        console.stop()
