"""A certificate authority made by a test: CA, server and client certificates with
``cryptography`` (the ``tls`` extra), written as the files brokers and clients read.

    ca = CertificateAuthority()
    server = ca.issue("CN=broker1", hosts=["127.0.0.1", "localhost"])
    server.write_pem(tmp / "broker.pem")                # ssl.keystore.location, PEM: key + chain
    server.write_pkcs12(tmp / "broker.p12", "secret")   # ssl.keystore.type=PKCS12
    ca.write_pem(tmp / "ca.pem")                        # ssl.truststore.location, PEM

Keys are EC P-256 (instant to make; every client strom is tested with accepts them).
Certificates are valid from an hour ago (clock skew) for ``valid_days``.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _key_pem(key: ec.EllipticCurvePrivateKey, password: str | None) -> bytes:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode()) if password
        else serialization.NoEncryption())  # fmt: skip
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             encryption)  # fmt: skip


@dataclass(frozen=True)
class Issued:
    """A key and its certificate chain (the certificate first, then the CA's)."""

    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate
    chain: tuple[x509.Certificate, ...]

    @property
    def certificate_der(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.DER)

    @property
    def chain_pem(self) -> str:
        return "".join(c.public_bytes(serialization.Encoding.PEM).decode()
                       for c in (self.certificate, *self.chain))  # fmt: skip

    def key_pem(self, password: str | None = None) -> str:
        """The private key, PKCS#8 PEM, encrypted when ``password`` is given."""
        return _key_pem(self.key, password).decode()

    def write_pem(self, path: Path, password: str | None = None) -> Path:
        """Key and chain in one PEM file (Kafka's PEM ``ssl.keystore.location``)."""
        path.write_text(self.key_pem(password) + self.chain_pem)
        path.chmod(0o600)
        return path

    def write_cert_and_key(self, cert: Path, key: Path, password: str | None = None) -> None:
        """The chain and the key in two files (librdkafka's ``ssl.certificate.location`` and
        ``ssl.key.location``, kafka-python's ``ssl_certfile`` / ``ssl_keyfile``)."""
        cert.write_text(self.chain_pem)
        key.write_text(self.key_pem(password))
        key.chmod(0o600)

    def write_pkcs12(self, path: Path, password: str) -> Path:
        """A PKCS#12 key store (``ssl.keystore.type=PKCS12``)."""
        data = pkcs12.serialize_key_and_certificates(
            b"strom", self.key, self.certificate, list(self.chain),
            serialization.BestAvailableEncryption(password.encode()))  # fmt: skip
        path.write_bytes(data)
        path.chmod(0o600)
        return path


class CertificateAuthority:
    """A self-signed CA that issues server and client certificates."""

    def __init__(self, subject: str = "CN=strom test CA,O=strom", valid_days: int = 2) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name.from_rfc4514_string(subject)
        now = _now()
        self.certificate = (
            x509.CertificateBuilder()
            .subject_name(name).issuer_name(name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=valid_days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True,
                                         crl_sign=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False,
                                         decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()),
                           critical=False)
            .sign(self.key, hashes.SHA256())
        )  # fmt: skip

    @property
    def pem(self) -> str:
        return self.certificate.public_bytes(serialization.Encoding.PEM).decode()

    def write_pem(self, path: Path) -> Path:
        """The CA certificate (a PEM trust store)."""
        path.write_text(self.pem)
        return path

    def write_pkcs12_truststore(self, path: Path, password: str) -> Path:
        """The CA certificate alone in a PKCS#12 store (``ssl.truststore.type=PKCS12``)."""
        data = pkcs12.serialize_key_and_certificates(
            None, None, None, [self.certificate],
            serialization.BestAvailableEncryption(password.encode()))  # fmt: skip
        path.write_bytes(data)
        return path

    def issue(self, subject: str, *, hosts: Iterable[str] = ("127.0.0.1", "localhost"),
              valid_days: int = 2, expired: bool = False) -> Issued:  # fmt: skip
        """A certificate for ``subject`` (RFC 4514, ``CN=alice,OU=eng``), good for TLS server
        and client authentication, naming ``hosts`` (IP addresses or DNS names) as
        alternative names. ``expired``: valid until an hour ago."""
        key = ec.generate_private_key(ec.SECP256R1())
        names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        now = _now()
        until = now - datetime.timedelta(hours=1) if expired else (
            now + datetime.timedelta(days=valid_days))  # fmt: skip
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name.from_rfc4514_string(subject))
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=2))
            .not_valid_after(until)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                  ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                self.key.public_key()), critical=False)
        )  # fmt: skip
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        return Issued(key, builder.sign(self.key, hashes.SHA256()), (self.certificate,))


@dataclass(frozen=True)
class TlsFiles:
    """A test CA and the files a broker and its clients read: the CA (``ca``, PEM), the
    broker's key and chain (``server``, one PEM file), a client's chain and key in two files
    (``client_cert``, ``client_key``) for the DN ``client_dn``."""

    authority: CertificateAuthority
    ca: Path
    server: Path
    client_cert: Path
    client_key: Path
    client_dn: str

    def listener_properties(self, listener: str, client_auth: str = "none") -> dict[str, str]:
        """``listener.name.<listener>.ssl.*`` for a TLS listener with these files."""
        prefix = f"listener.name.{listener.lower()}."
        return {
            prefix + "ssl.keystore.type": "PEM",
            prefix + "ssl.keystore.location": str(self.server),
            prefix + "ssl.truststore.type": "PEM",
            prefix + "ssl.truststore.location": str(self.ca),
            prefix + "ssl.client.auth": client_auth,
        }

    def client_config(self, mtls: bool = False) -> dict[str, str]:
        """librdkafka (confluent-kafka, kcat) settings for a TLS listener of this CA."""
        conf = {"security.protocol": "SSL", "ssl.ca.location": str(self.ca)}
        if mtls:
            conf |= {"ssl.certificate.location": str(self.client_cert),
                     "ssl.key.location": str(self.client_key)}  # fmt: skip
        return conf


def make_tls_files(directory: Path, *, hosts: Iterable[str] = ("127.0.0.1", "localhost"),
                   client_dn: str = "CN=alice,OU=eng,O=Acme,C=US") -> TlsFiles:  # fmt: skip
    """A new CA, a broker certificate for ``hosts`` and a client certificate, written under
    ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = CertificateAuthority()
    server = ca.issue("CN=strom-broker,O=strom", hosts=hosts)
    client = ca.issue(client_dn, hosts=())
    client.write_cert_and_key(directory / "client.crt", directory / "client.key")
    return TlsFiles(ca, ca.write_pem(directory / "ca.pem"),
                    server.write_pem(directory / "broker.pem"), directory / "client.crt",
                    directory / "client.key", client_dn)  # fmt: skip
