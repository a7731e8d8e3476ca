"""The admin listener (/metrics, /health/*) with HTTPS, client certificates and a bearer token,
on a real broker process, with a CA made by the test."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from strom.testing import BrokerProcess
from strom.testing.tls import CertificateAuthority
from tests.integration.admin_http import Scrape

TOKEN = "s3cr3t-token-for-prometheus-0123456789"


def fetch(url: str, context: ssl.SSLContext | None = None,
          token: str | None = None) -> tuple[int, bytes]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    req = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10, context=context) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_https_client_certificates_and_token(tmp_path: Path) -> None:
    ca = CertificateAuthority()
    keystore = ca.issue("CN=admin", hosts=("127.0.0.1",)).write_pem(tmp_path / "admin.pem")
    ca_file = ca.write_pem(tmp_path / "ca.pem")
    ca.issue("CN=prometheus", hosts=()).write_cert_and_key(tmp_path / "prometheus.crt",
                                                           tmp_path / "prometheus.key")
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    p = "strom.admin.listener."
    broker = BrokerProcess(tmp_path / "data", admin=True, settings={
        p + "ssl.keystore.location": str(keystore),
        p + "ssl.truststore.location": str(ca_file),
        p + "ssl.client.auth": "required",
        p + "token.file": str(token_file),
    })
    broker.start()
    try:
        url = f"https://127.0.0.1:{broker.admin_port}"
        ctx = ssl.create_default_context(cafile=str(ca_file))
        ctx.load_cert_chain(str(tmp_path / "prometheus.crt"), str(tmp_path / "prometheus.key"))
        status, body = fetch(url + "/metrics", ctx, TOKEN)
        assert status == 200
        assert Scrape(body.decode()).types  # a real exposition, parsed
        assert fetch(url + "/health/live", ctx)[0] == 200  # liveness needs no token
        for token in (None, "wrong-token-wrong-token-wrong"):
            assert fetch(url + "/metrics", ctx, token)[0] == 401
            assert fetch(url + "/health/ready", ctx, token)[0] == 401
        # without a client certificate the handshake fails; plain HTTP gets nothing
        with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
            fetch(url + "/metrics", ssl.create_default_context(cafile=str(ca_file)), TOKEN)
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
            fetch(f"http://127.0.0.1:{broker.admin_port}/metrics", None, TOKEN)
        assert "bearer token + client certificates" in broker.log_tail(200)
    finally:
        broker.stop()


def test_unusable_settings_are_one_line(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", admin=True, settings={
        "strom.admin.listener.token.file": str(tmp_path / "missing")})
    with pytest.raises(RuntimeError) as info:
        broker.start(timeout=30)
    assert "strom.admin.listener.token.file: cannot read" in str(info.value)
    assert "Traceback" not in str(info.value)
