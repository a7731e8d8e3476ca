"""TLS for strom's HTTP listeners (Connect's REST API, the console, the metrics listener),
configured with Kafka's ``ssl.*`` names.

The keys are Kafka's, given without their listener prefix (the caller strips
``listeners.https.`` or the like):

- ``ssl.keystore.type``: ``PEM`` or ``PKCS12`` (``JKS`` is Java's own format: refused with a
  line saying to convert it). PEM is the default here, PKCS12 is read through ``cryptography``.
- ``ssl.keystore.location`` (PEM: the private key and the certificate chain in one file;
  PKCS12: the store), ``ssl.keystore.password`` (PKCS12), ``ssl.key.password`` (an encrypted
  PEM key), or KIP-651's inline ``ssl.keystore.certificate.chain`` + ``ssl.keystore.key``.
- ``ssl.truststore.type`` / ``ssl.truststore.location`` / ``ssl.truststore.password`` /
  inline ``ssl.truststore.certificates``: the CAs client certificates (server side) or the
  server (client side) are checked against.
- ``ssl.client.auth``: ``none`` (default), ``requested``, ``required``.
- ``ssl.enabled.protocols`` (``TLSv1.2,TLSv1.3``; the lowest one listed is the minimum) and
  ``ssl.cipher.suites`` (OpenSSL names, for TLS 1.2).

Python's ``ssl`` loads a certificate chain only from a file: inline PEM and PKCS12 key
stores are written as PEM to a file in a fresh private directory (mode 0700), loaded, and
removed at once. Every problem is one :class:`TlsConfigError` line naming the key.
"""

from __future__ import annotations

import contextlib
import os
import ssl
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL,
               "required": ssl.CERT_REQUIRED}  # fmt: skip
PROTOCOLS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


class TlsConfigError(ValueError):
    """A TLS setting that cannot be used (one line, naming the key)."""


def has_keystore(conf: Mapping[str, str]) -> bool:
    return bool(conf.get("ssl.keystore.location") or conf.get("ssl.keystore.certificate.chain"))


def _read(conf: Mapping[str, str], key: str) -> bytes:
    path = conf[key]
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise TlsConfigError(f"{key}: cannot read {path}: {exc.strerror or exc}") from None


def _password(conf: Mapping[str, str], key: str) -> bytes | None:
    value = conf.get(key)
    return value.encode() if value else None


def _store_type(conf: Mapping[str, str], key: str) -> str:
    kind = (conf.get(key) or "PEM").strip().upper()
    if kind == "JKS":
        raise TlsConfigError(f"{key}=JKS is Java's own format: convert the store to PKCS12 "
                             f"(keytool -importkeystore -deststoretype PKCS12) or PEM")
    if kind not in ("PEM", "PKCS12"):
        raise TlsConfigError(f"{key}: unsupported store type {kind!r} (PEM or PKCS12)")
    return kind


def pkcs12_key_and_chain(data: bytes, password: bytes | None, key: str) -> bytes:
    """A PKCS12 key store as PEM: the unencrypted private key, then the certificates."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    try:
        private, cert, extra = pkcs12.load_key_and_certificates(data, password)
    except ValueError as exc:
        raise TlsConfigError(f"{key}: cannot open the PKCS12 store: {exc}") from None
    if private is None or cert is None:
        raise TlsConfigError(f"{key}: the PKCS12 store holds no private key and certificate")
    pem = private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    for c in (cert, *extra):
        pem += c.public_bytes(serialization.Encoding.PEM)
    return pem


def pkcs12_certificates(data: bytes, password: bytes | None, key: str) -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    try:
        store = pkcs12.load_pkcs12(data, password)
    except ValueError as exc:
        raise TlsConfigError(f"{key}: cannot open the PKCS12 store: {exc}") from None
    certs = [c.certificate for c in store.additional_certs]
    if store.cert is not None:
        certs.append(store.cert.certificate)
    if not certs:
        raise TlsConfigError(f"{key}: the PKCS12 trust store holds no certificate")
    return "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certs)


@contextlib.contextmanager
def _private_file(data: bytes) -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="strom-tls-") as folder:
        os.chmod(folder, 0o700)
        path = os.path.join(folder, "keystore.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        yield path


def load_key_and_chain(ctx: ssl.SSLContext, pem: bytes, password: bytes | None,
                       where: str) -> None:
    """A PEM private key and certificate chain, from memory (module doc: a private file)."""
    with _private_file(pem) as path:
        try:
            ctx.load_cert_chain(path, password=password)
        except ssl.SSLError as exc:
            raise TlsConfigError(f"{where}: cannot load the key and certificate chain "
                                 f"({exc.reason or exc}; is the key password right?)") from None


def _load_keystore(ctx: ssl.SSLContext, conf: Mapping[str, str]) -> None:
    kind = _store_type(conf, "ssl.keystore.type")
    key_password = _password(conf, "ssl.key.password")
    if conf.get("ssl.keystore.certificate.chain"):
        if kind != "PEM":
            raise TlsConfigError("ssl.keystore.certificate.chain needs ssl.keystore.type=PEM")
        if not conf.get("ssl.keystore.key"):
            raise TlsConfigError("ssl.keystore.certificate.chain is set but ssl.keystore.key "
                                 "is not")
        pem = (conf["ssl.keystore.key"].strip() + "\n"
               + conf["ssl.keystore.certificate.chain"].strip() + "\n").encode()
        where = "ssl.keystore.certificate.chain"
    elif kind == "PKCS12":
        pem = pkcs12_key_and_chain(_read(conf, "ssl.keystore.location"),
                                    _password(conf, "ssl.keystore.password"),
                                    "ssl.keystore.location")
        key_password = None
        where = "ssl.keystore.location"
    else:
        pem = _read(conf, "ssl.keystore.location")
        where = "ssl.keystore.location"
    load_key_and_chain(ctx, pem, key_password, where)


def _load_truststore(ctx: ssl.SSLContext, conf: Mapping[str, str]) -> bool:
    """Loads the configured trust store; False when none is configured."""
    if conf.get("ssl.truststore.certificates"):
        cadata = conf["ssl.truststore.certificates"]
        where = "ssl.truststore.certificates"
    elif conf.get("ssl.truststore.location"):
        where = "ssl.truststore.location"
        data = _read(conf, where)
        if _store_type(conf, "ssl.truststore.type") == "PKCS12":
            cadata = pkcs12_certificates(data, _password(conf, "ssl.truststore.password"),
                                          where)
        else:
            cadata = data.decode("ascii", errors="replace")
    else:
        return False
    try:
        ctx.load_verify_locations(cadata=cadata)
    except ssl.SSLError as exc:
        raise TlsConfigError(f"{where}: no usable CA certificate ({exc.reason or exc})") from None
    return True


def _protocols_and_ciphers(ctx: ssl.SSLContext, conf: Mapping[str, str]) -> None:
    names = [p.strip() for p in (conf.get("ssl.enabled.protocols") or "").split(",")
             if p.strip()]
    if names:
        unknown = [n for n in names if n not in PROTOCOLS]
        if unknown:
            raise TlsConfigError(f"ssl.enabled.protocols: unsupported {', '.join(unknown)} "
                                 f"(TLSv1.2, TLSv1.3)")
        versions = sorted(PROTOCOLS[n] for n in names)
        ctx.minimum_version, ctx.maximum_version = versions[0], versions[-1]
    ciphers = [c.strip() for c in (conf.get("ssl.cipher.suites") or "").split(",") if c.strip()]
    if ciphers:
        try:
            ctx.set_ciphers(":".join(ciphers))
        except ssl.SSLError:
            raise TlsConfigError(f"ssl.cipher.suites: no usable cipher in "
                                 f"{conf['ssl.cipher.suites']!r}") from None


def server_context(conf: Mapping[str, str]) -> ssl.SSLContext:
    """The server side: our key store, and client certificates checked per ssl.client.auth."""
    if not has_keystore(conf):
        raise TlsConfigError("TLS needs a key store: ssl.keystore.location (or "
                             "ssl.keystore.certificate.chain and ssl.keystore.key)")
    auth = (conf.get("ssl.client.auth") or "none").strip().lower()
    if auth not in CLIENT_AUTH:
        raise TlsConfigError(f"ssl.client.auth: expected none, requested or required, "
                             f"got {auth!r}")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    _protocols_and_ciphers(ctx, conf)
    _load_keystore(ctx, conf)
    trusted = _load_truststore(ctx, conf)
    if auth != "none" and not trusted:
        raise TlsConfigError(f"ssl.client.auth={auth} needs a trust store "
                             f"(ssl.truststore.location or ssl.truststore.certificates)")
    ctx.verify_mode = CLIENT_AUTH[auth]
    return ctx


def client_context(conf: Mapping[str, str]) -> ssl.SSLContext:
    """The client side (one worker calling another): the server checked against the trust
    store (the system's CAs without one), our key store presented when one is configured.
    ``ssl.endpoint.identification.algorithm`` empty turns host name checking off, as Kafka."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    _protocols_and_ciphers(ctx, conf)
    if not _load_truststore(ctx, conf):
        ctx.load_default_certs()
    if has_keystore(conf):
        _load_keystore(ctx, conf)
    algorithm = conf.get("ssl.endpoint.identification.algorithm", "https")
    ctx.check_hostname = bool(algorithm and algorithm.strip())
    return ctx


def serve_with(config: Any, context: ssl.SSLContext | None) -> Any:
    """A uvicorn ``Config`` made to serve TLS with ``context`` (None: plain HTTP).

    uvicorn builds its own context from certificate files only; loading the config first
    and setting its ``ssl`` afterwards hands it ours (PKCS12, inline PEM, client auth)."""
    if context is not None:
        config.load()
        config.ssl = context
    return config
