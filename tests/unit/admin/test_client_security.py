"""Java client security names carried over to librdkafka's; the wire connection's TLS."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from strom.admin.client_security import WireSecurity, jaas_credentials, to_librdkafka
from strom.admin.errors import InvalidInputError
from strom.testing.tls import CertificateAuthority


@pytest.fixture(scope="module")
def ca() -> CertificateAuthority:
    return CertificateAuthority()


def test_jaas_credentials_plain_and_scram() -> None:
    plain = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
             'username="alice" password="a \\"quoted\\" ; secret";')
    assert jaas_credentials(plain) == ("alice", 'a "quoted" ; secret')
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule required username=bob password=pw;"
    assert jaas_credentials(scram) == ("bob", "pw")
    with pytest.raises(InvalidInputError, match="OAuthBearerLoginModule is not supported"):
        jaas_credentials("org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule "
                         "required;")
    with pytest.raises(InvalidInputError, match="username and password"):
        jaas_credentials("org.apache.kafka.common.security.plain.PlainLoginModule required "
                         "username=x;")


def test_java_names_carried_over(ca: CertificateAuthority, tmp_path: Path) -> None:
    client = ca.issue("CN=c", hosts=())
    ca_file = ca.write_pem(tmp_path / "ca.pem")
    keystore = client.write_pem(tmp_path / "c.pem")
    out = to_librdkafka({
        "bootstrap.servers": "b:9093", "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
                            'required username="u" password="p";',
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca_file),
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystore),
        "ssl.endpoint.identification.algorithm": "", "ssl.client.auth": "required"})
    key_pem = client.key_pem().strip()
    assert out == {
        "bootstrap.servers": "b:9093", "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "u", "sasl.password": "p",
        "ssl.ca.location": str(ca_file), "ssl.key.pem": key_pem,
        "ssl.certificate.pem": client.chain_pem.strip(),
        "ssl.endpoint.identification.algorithm": "none"}
    # PKCS12 trust store: its certificates inline; librdkafka names untouched
    store = ca.write_pkcs12_truststore(tmp_path / "trust.p12", "pw")
    out = to_librdkafka({"ssl.truststore.type": "PKCS12", "ssl.truststore.location": str(store),
                         "ssl.truststore.password": "pw"})
    assert ca.pem.strip() in out["ssl.ca.pem"]
    assert to_librdkafka({"ssl.ca.location": "/x", "sasl.username": "u"}) == {
        "ssl.ca.location": "/x", "sasl.username": "u"}
    with pytest.raises(InvalidInputError, match="JKS is Java's own format"):
        to_librdkafka({"ssl.truststore.type": "JKS", "ssl.truststore.location": "/x.jks"})
    with pytest.raises(InvalidInputError, match="cannot read"):
        to_librdkafka({"ssl.truststore.type": "PKCS12",
                       "ssl.truststore.location": str(tmp_path / "missing.p12")})


def test_wire_security(ca: CertificateAuthority, tmp_path: Path) -> None:
    assert WireSecurity.from_properties({}).context is None
    ca.issue("CN=w", hosts=()).write_cert_and_key(tmp_path / "w.crt", tmp_path / "w.key")
    tls = WireSecurity.from_properties({
        "security.protocol": "ssl", "ssl.ca.location": str(ca.write_pem(tmp_path / "ca.pem")),
        "ssl.certificate.location": str(tmp_path / "w.crt"),
        "ssl.key.location": str(tmp_path / "w.key")})
    assert tls.protocol == "SSL" and tls.context is not None
    assert tls.context.verify_mode == ssl.CERT_REQUIRED and tls.context.check_hostname
    loose = WireSecurity.from_properties({"security.protocol": "SSL",
                                          "enable.ssl.certificate.verification": "false"})
    assert loose.context is not None and loose.context.verify_mode == ssl.CERT_NONE
    with pytest.raises(InvalidInputError, match="security.protocol"):
        WireSecurity.from_properties({"security.protocol": "TLS"})
    with pytest.raises(InvalidInputError, match="sasl.mechanism=GSSAPI"):
        WireSecurity.from_properties({"security.protocol": "SASL_PLAINTEXT"})
    with pytest.raises(InvalidInputError, match="needs sasl.username"):
        WireSecurity.from_properties({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"})
    sasl = WireSecurity.from_properties({
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                            'username="bob" password="secret";'})  # fmt: skip
    assert sasl.context is None and sasl.sasl is not None
    assert (sasl.sasl.mechanism, sasl.sasl.username, sasl.sasl.password) == (
        "SCRAM-SHA-256", "bob", "secret")
    import socket

    a, b = socket.socketpair()
    try:  # no credentials at all: refused before a byte is sent
        with pytest.raises(InvalidInputError, match="needs sasl.mechanism"):
            WireSecurity("SASL_PLAINTEXT").wrap(a, "localhost")
    finally:
        b.close()
