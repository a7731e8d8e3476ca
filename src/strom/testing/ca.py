"""A certificate authority made on the spot, for tests and local tries (``cryptography``).

:class:`LocalCA` makes a self-signed CA (EC P-256, valid a day by default) and issues leaf
certificates from it: server ones with their DNS names and IP addresses as subject
alternative names, client ones with the given subject (its DN becomes an mTLS principal).
Files are PEM, written with mode 0600: ``<name>.crt``, ``<name>.key`` and ``<name>.pem`` (key
then certificate then CA: the ``ssl.keystore.location`` layout of ``ssl.keystore.type=PEM``),
and ``ca.crt`` (a trust store). :meth:`LocalCA.pkcs12` writes a PKCS12 key store.
Never for production: the CA key sits next to what it signs.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _write(path: Path, data: bytes) -> Path:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    return path


def _pem_key(key: ec.EllipticCurvePrivateKey, password: str | None = None) -> bytes:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode()) if password
        else serialization.NoEncryption())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             encryption)


@dataclass
class Issued:
    """One leaf certificate's files."""

    cert: Path  # the certificate
    key: Path  # its private key
    keystore: Path  # key + certificate + CA, one PEM file
    private_key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate


class LocalCA:
    def __init__(self, folder: Path, name: str = "strom test CA",
                 days: float = 1.0) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.days = days
        self.key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (
            x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .sign(self.key, hashes.SHA256()))
        self.ca_pem = self.cert.public_bytes(serialization.Encoding.PEM)
        self.ca_file = _write(self.folder / "ca.crt", self.ca_pem)

    def issue(self, name: str, *, hosts: tuple[str, ...] = ("localhost", "127.0.0.1"),
              client: bool = False, subject: str | None = None,
              key_password: str | None = None) -> Issued:
        """A leaf certificate ``name``: a server one for ``hosts``, or with ``client`` a
        client one whose subject is ``CN=<subject or name>``."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME,
                                                        subject or name)]))
            .issuer_name(self.cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=self.days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.CLIENT_AUTH] if client
                else [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                critical=False))
        if not client:
            names: list[x509.GeneralName] = []
            for host in hosts:
                try:
                    names.append(x509.IPAddress(ipaddress.ip_address(host)))
                except ValueError:
                    names.append(x509.DNSName(host))
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        cert_pem = cert.public_bytes(serialization.Encoding.PEM)
        key_pem = _pem_key(key, key_password)
        return Issued(
            cert=_write(self.folder / f"{name}.crt", cert_pem),
            key=_write(self.folder / f"{name}.key", key_pem),
            keystore=_write(self.folder / f"{name}.pem", key_pem + cert_pem + self.ca_pem),
            private_key=key, certificate=cert)

    def pkcs12(self, issued: Issued, name: str, password: str) -> Path:
        """``issued`` as a PKCS12 key store ``<name>.p12`` (with the CA in its chain)."""
        data = pkcs12.serialize_key_and_certificates(
            name.encode(), issued.private_key, issued.certificate, [self.cert],
            serialization.BestAvailableEncryption(password.encode()))
        return _write(self.folder / f"{name}.p12", data)
