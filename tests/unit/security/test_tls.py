"""TLS contexts from Kafka's ssl.* settings (strom.security.tls), checked by real handshakes
over a socket pair."""

from __future__ import annotations

import socket
import ssl
import threading
from pathlib import Path

import pytest

from strom.security.listeners import ListenerSpec
from strom.security.tls import (
    ANONYMOUS,
    ServerTls,
    TlsConfigError,
    client_context,
    openssl_cipher_name,
    server_context,
)
from strom.testing.tls import CertificateAuthority, Issued


def spec(values: dict[str, str], name: str = "SSL") -> ListenerSpec:
    return ListenerSpec(name, "127.0.0.1", 9093, "SSL", values)


def handshake(server: ssl.SSLContext, client: ssl.SSLContext) -> tuple[ssl.SSLSocket | None, str]:
    """Handshake over a socket pair; (the server's socket, the client's error or "")."""
    a, b = socket.socketpair()
    a.settimeout(5)
    b.settimeout(5)
    result: dict[str, object] = {}

    def serve() -> None:
        try:
            served = server.wrap_socket(a, server_side=True)
            result["server"] = served
            served.recv(1)
            served.sendall(b"y")
        except (ssl.SSLError, OSError) as exc:
            result["error"] = exc
            a.close()

    thread = threading.Thread(target=serve)
    thread.start()
    error = ""
    try:
        c = client.wrap_socket(b, server_hostname="localhost")
        c.sendall(b"x")  # TLS 1.3: a refused client certificate shows on the first use
        c.recv(1)
    except (ssl.SSLError, OSError) as exc:
        error = str(exc)
    thread.join(5)
    got = result.get("server")
    return (got if isinstance(got, ssl.SSLSocket) else None), error


@pytest.fixture(scope="module")
def ca() -> CertificateAuthority:
    return CertificateAuthority()


@pytest.fixture(scope="module")
def server_cert(ca: CertificateAuthority) -> Issued:
    return ca.issue("CN=broker", hosts=["localhost", "127.0.0.1"])


def client(ca: CertificateAuthority, tmp: Path, cert: Issued | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ca.write_pem(tmp / "ca-client.pem")))
    if cert is not None:
        cert.write_cert_and_key(tmp / "c.crt", tmp / "c.key")
        ctx.load_cert_chain(tmp / "c.crt", tmp / "c.key")
    return ctx


def test_pem_file_with_encrypted_key(ca: CertificateAuthority, server_cert: Issued,
                                     tmp_path: Path) -> None:  # fmt: skip
    store = server_cert.write_pem(tmp_path / "broker.pem", password="k3y")
    ctx = server_context(spec({"ssl.keystore.location": str(store), "ssl.key.password": "k3y"}))
    server, error = handshake(ctx, client(ca, tmp_path))
    assert error == "" and server is not None and server.version() in ("TLSv1.2", "TLSv1.3")
    with pytest.raises(TlsConfigError, match="listener SSL: ssl.keystore.location: no usable"):
        server_context(spec({"ssl.keystore.location": str(store), "ssl.key.password": "bad"}))


def test_inline_pem_kip_651(ca: CertificateAuthority, server_cert: Issued, tmp_path: Path) -> None:
    ctx = server_context(spec({"listener.name.ssl.ssl.keystore.type": "PEM",
                               "listener.name.ssl.ssl.keystore.key": server_cert.key_pem(),
                               "listener.name.ssl.ssl.keystore.certificate.chain":
                                   server_cert.chain_pem}))  # fmt: skip
    assert handshake(ctx, client(ca, tmp_path))[1] == ""


def test_pkcs12_key_store_and_trust_store(ca: CertificateAuthority, server_cert: Issued,
                                          tmp_path: Path) -> None:  # fmt: skip
    store = server_cert.write_pkcs12(tmp_path / "broker.p12", "pw")
    trust = ca.write_pkcs12_truststore(tmp_path / "trust.p12", "tpw")
    values = {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(store),
              "ssl.keystore.password": "pw", "ssl.truststore.type": "PKCS12",
              "ssl.truststore.location": str(trust), "ssl.truststore.password": "tpw",
              "ssl.client.auth": "required"}  # fmt: skip
    ctx = server_context(spec(values))
    alice = ca.issue("CN=alice,O=Acme", hosts=())
    server, error = handshake(ctx, client(ca, tmp_path, alice))
    assert error == "" and server is not None
    assert ServerTls(spec(values)).principal(server) == "User:CN=alice,O=Acme"
    with pytest.raises(TlsConfigError, match="wrong ssl.keystore.password"):
        server_context(spec({**values, "ssl.keystore.password": "nope"}))


def test_client_auth_required_refuses_without_or_with_an_untrusted_certificate(
        ca: CertificateAuthority, server_cert: Issued, tmp_path: Path) -> None:  # fmt: skip
    store = server_cert.write_pem(tmp_path / "broker.pem")
    values = {"ssl.keystore.location": str(store), "ssl.truststore.location":
              str(ca.write_pem(tmp_path / "ca.pem")), "ssl.client.auth": "required"}  # fmt: skip
    server, error = handshake(server_context(spec(values)), client(ca, tmp_path))
    assert server is None and error
    stranger = CertificateAuthority("CN=other CA").issue("CN=mallory", hosts=())
    server, error = handshake(server_context(spec(values)), client(ca, tmp_path, stranger))
    assert server is None and error
    # requested: no certificate is fine (ANONYMOUS), a trusted one names the client
    requested = {**values, "ssl.client.auth": "requested"}
    server, error = handshake(server_context(spec(requested)), client(ca, tmp_path))
    assert error == "" and ServerTls(spec(requested)).principal(server) == ANONYMOUS


def test_principal_mapping_rules_per_listener(ca: CertificateAuthority, server_cert: Issued,
                                              tmp_path: Path) -> None:  # fmt: skip
    values = {
        "ssl.keystore.location": str(server_cert.write_pem(tmp_path / "b.pem")),
        "ssl.truststore.location": str(ca.write_pem(tmp_path / "ca.pem")),
        "ssl.client.auth": "required",
        "listener.name.ssl.ssl.principal.mapping.rules": "RULE:^CN=([^,]*),.*$/$1/U",
    }
    tls = ServerTls(spec(values))
    server, _ = handshake(tls.context, client(ca, tmp_path, ca.issue("CN=bob,O=x", hosts=())))
    assert tls.principal(server) == "User:BOB"


def test_enabled_protocols_and_cipher_suites(ca: CertificateAuthority, server_cert: Issued,
                                             tmp_path: Path) -> None:  # fmt: skip
    base = {"ssl.keystore.location": str(server_cert.write_pem(tmp_path / "b.pem"))}
    ctx = server_context(
        spec(
            {
                **base,
                "ssl.enabled.protocols": "TLSv1.2",
                "ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
            }
        )
    )
    server, error = handshake(ctx, client(ca, tmp_path))
    assert error == "" and server is not None
    assert server.version() == "TLSv1.2" and server.cipher()[0] == "ECDHE-ECDSA-AES256-GCM-SHA384"
    only13 = server_context(spec({**base, "ssl.enabled.protocols": "TLSv1.3"}))
    old = client(ca, tmp_path)
    old.maximum_version = ssl.TLSVersion.TLSv1_2
    assert handshake(only13, old)[0] is None
    with pytest.raises(TlsConfigError, match="unknown protocol 'SSLv3'"):
        server_context(spec({**base, "ssl.enabled.protocols": "SSLv3"}))
    with pytest.raises(TlsConfigError, match="unknown or unavailable suites TLS_FOO"):
        server_context(spec({**base, "ssl.cipher.suites": "TLS_FOO"}))
    assert openssl_cipher_name("TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256") == (
        "ECDHE-RSA-CHACHA20-POLY1305"
    )
    assert openssl_cipher_name("TLS_RSA_WITH_AES_128_CBC_SHA") == "AES128-SHA"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({}, "needs a key store"),
        ({"ssl.keystore.type": "JKS", "ssl.keystore.location": "/x.jks"}, "JKS is not supported"),
        ({"ssl.keystore.location": "/nonexistent.pem"}, "cannot read /nonexistent.pem"),
        ({"ssl.keystore.key": "-----BEGIN PRIVATE KEY-----"}, "needs both"),
    ],
)
def test_bad_settings_name_listener_and_key(values: dict[str, str], message: str) -> None:
    with pytest.raises(TlsConfigError, match=message):
        server_context(spec(values))


def test_reload_moves_a_new_key_store_into_the_live_context(
        ca: CertificateAuthority, tmp_path: Path) -> None:  # fmt: skip
    first = ca.issue("CN=old", hosts=["localhost"])
    second = ca.issue("CN=new", hosts=["localhost"])
    values = {"ssl.keystore.location": str(first.write_pem(tmp_path / "old.pem"))}
    tls = ServerTls(spec(values))
    live = tls.context

    def served_cn() -> str:
        a, b = socket.socketpair()
        a.settimeout(5)
        threading.Thread(target=lambda: live.wrap_socket(a, server_side=True), daemon=True).start()
        with client(ca, tmp_path).wrap_socket(b, server_hostname="localhost") as c:
            cert = c.getpeercert()
        return dict(x[0] for x in cert["subject"])["commonName"]  # type: ignore[index]

    assert served_cn() == "old" and not tls.reload()
    values["listener.name.ssl.ssl.keystore.location"] = str(tmp_path / "missing.pem")
    with pytest.raises(TlsConfigError):
        tls.reload()
    assert served_cn() == "old"  # a bad store changes nothing
    values["listener.name.ssl.ssl.keystore.location"] = str(second.write_pem(tmp_path / "n.pem"))
    assert tls.reload() and tls.context is live and served_cn() == "new"


def test_client_context_verifies_the_peer(ca: CertificateAuthority, server_cert: Issued,
                                          tmp_path: Path) -> None:  # fmt: skip
    values = {
        "ssl.keystore.location": str(server_cert.write_pem(tmp_path / "b.pem")),
        "ssl.truststore.location": str(ca.write_pem(tmp_path / "ca.pem")),
    }
    server = server_context(spec({**values, "ssl.client.auth": "required"}))
    assert handshake(server, client_context(spec(values)))[1] == ""  # and presents its own
    other = CertificateAuthority("CN=other").issue("CN=x", hosts=["localhost"])
    stranger = server_context(spec({"ssl.keystore.location":
                                    str(other.write_pem(tmp_path / "o.pem"))}))  # fmt: skip
    assert "certificate verify failed" in handshake(stranger, client_context(spec(values)))[1]


def test_sasl_ssl_ignores_the_broker_wide_client_auth(server_cert: Issued, tmp_path: Path) -> None:
    values = {
        "ssl.keystore.location": str(server_cert.write_pem(tmp_path / "b.pem")),
        "ssl.client.auth": "required",
    }
    sasl = ListenerSpec("SASL_SSL", "127.0.0.1", 9094, "SASL_SSL", values)
    assert server_context(sasl).verify_mode == ssl.CERT_NONE  # KIP-684
    assert server_context(spec(values)).verify_mode == ssl.CERT_REQUIRED
    values["listener.name.sasl_ssl.ssl.client.auth"] = "requested"
    assert server_context(sasl).verify_mode == ssl.CERT_OPTIONAL
