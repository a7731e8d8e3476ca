"""TLS for a listener (and for the broker's own connections to peers) from Kafka's ``ssl.*``
settings, with the stdlib :mod:`ssl` module.

Every setting is read through the listener (:meth:`ListenerSpec.get
<strom.security.listeners.ListenerSpec.get>`: ``listener.name.<l>.<key>`` first):

- key store: ``ssl.keystore.type`` PEM or PKCS12 (unset: PEM when the file is PEM text or the
  key is given inline, else PKCS12; Kafka's JKS is refused with a hint to convert it).
  PEM: ``ssl.keystore.location`` holding the private key and the certificate chain, or both
  inline (KIP-651: ``ssl.keystore.key`` and ``ssl.keystore.certificate.chain``), the key
  encrypted with ``ssl.key.password`` or not. PKCS12 (through ``cryptography``): the file,
  ``ssl.keystore.password``, the key's own ``ssl.key.password`` if it differs.
- trust store: ``ssl.truststore.type`` PEM (``ssl.truststore.location`` or inline
  ``ssl.truststore.certificates``) or PKCS12 (``ssl.truststore.password``); none: the
  system's CAs.
- ``ssl.client.auth``: ``none`` (default), ``requested`` (a certificate is verified if sent),
  ``required`` (no certificate, no connection: the handshake fails and nothing is read). On a
  SASL_SSL listener only ``listener.name.<l>.ssl.client.auth`` counts (KIP-684).
- ``ssl.enabled.protocols`` (default ``TLSv1.2,TLSv1.3``): the lowest and highest become the
  context's bounds. ``ssl.cipher.suites``: Kafka's (IANA) names such as
  ``TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384`` or OpenSSL's; the TLS 1.2 ones restrict the
  context's ciphers; the stdlib cannot restrict TLS 1.3 suites (TLS 1.3 names are checked and
  otherwise accepted, all TLS 1.3 suites stay on).

Key material given inline or from a PKCS12 store reaches OpenSSL through an anonymous memory
file (``memfd``; never written to disk). :class:`ServerTls` keeps one live context per listener;
:meth:`ServerTls.reload` builds a new one from the current settings (a dynamic change, KIP-226)
and, once it loaded, moves its key, chain and trusted CAs into the live context, so new
handshakes use them and open connections are untouched (CAs are added, never removed: OpenSSL
cannot forget one; dropping a CA takes a restart).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import ssl
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from strom.security.principal_mapping import PrincipalMapper, distinguished_name

if TYPE_CHECKING:
    from strom.security.listeners import ListenerSpec

log = logging.getLogger(__name__)
ANONYMOUS = "User:ANONYMOUS"
CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL,
               "required": ssl.CERT_REQUIRED}  # fmt: skip
PROTOCOLS = {"TLSv1": ssl.TLSVersion.TLSv1, "TLSv1.1": ssl.TLSVersion.TLSv1_1,
             "TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}  # fmt: skip
#: the settings a reload reads (KIP-226's dynamic SSL configs)
RELOADED_KEYS = (
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.truststore.type",
    "ssl.truststore.location", "ssl.truststore.password", "ssl.truststore.certificates",
)  # fmt: skip
_TLS13 = {"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256",
          "TLS_AES_128_CCM_SHA256", "TLS_AES_128_CCM_8_SHA256"}  # fmt: skip
_IANA = re.compile(r"^TLS_(?P<kx>ECDHE_ECDSA|ECDHE_RSA|DHE_RSA|RSA)_WITH_(?P<cipher>\w+?)"
                   r"_(?P<mac>SHA|SHA256|SHA384)$")  # fmt: skip
_KX = {"ECDHE_ECDSA": "ECDHE-ECDSA", "ECDHE_RSA": "ECDHE-RSA", "DHE_RSA": "DHE-RSA", "RSA": ""}


class TlsConfigError(ValueError):
    """An ``ssl.*`` setting that cannot be used; the message names the listener and key."""


class _Settings:
    """A listener's ``ssl.*`` values with error messages naming the listener."""

    def __init__(self, spec: ListenerSpec) -> None:
        self.spec = spec

    def get(self, key: str) -> str | None:
        value = self.spec.get(key)
        return value if value not in (None, "") else None

    def error(self, key: str, message: str) -> TlsConfigError:
        return TlsConfigError(f"listener {self.spec.name}: {key}: {message}")

    def password(self, key: str) -> bytes | None:
        value = self.get(key)
        return value.encode() if value is not None else None


@contextlib.contextmanager
def _memory_file(data: bytes) -> Iterator[str]:
    """A path OpenSSL can read ``data`` from: an anonymous memory file where the OS has one
    (Linux), else a private temporary file removed at once."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("strom-tls", 0)
        try:
            os.write(fd, data)
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "material.pem"
        path.touch(0o600)
        path.write_bytes(data)
        yield str(path)


def _read(s: _Settings, key: str) -> bytes:
    location = s.get(key)
    assert location is not None
    try:
        return Path(location).read_bytes()
    except OSError as exc:
        raise s.error(key, f"cannot read {location}: {exc.strerror or exc}") from None


def _store_type(s: _Settings, kind: str, data: bytes | None) -> str:
    declared = s.get(f"ssl.{kind}.type")
    if declared is not None:
        found = declared.upper()
        if found == "JKS":
            raise s.error(
                f"ssl.{kind}.type",
                "JKS is not supported: convert it with keytool "
                "-importkeystore -deststoretype PKCS12, or use PEM",
            )
        if found not in ("PEM", "PKCS12"):
            raise s.error(f"ssl.{kind}.type", f"{declared!r} is not PEM or PKCS12")
        return found
    if data is None or b"-----BEGIN" in data[:4096]:
        return "PEM"
    return "PKCS12"


def _pkcs12(s: _Settings, kind: str, data: bytes) -> tuple[bytes | None, str]:
    """(the key as unencrypted PKCS#8 PEM or None, the certificates as PEM) of a PKCS12 store."""
    from cryptography.hazmat.primitives import serialization  # the tls extra
    from cryptography.hazmat.primitives.serialization import pkcs12

    password = s.password(f"ssl.{kind}.password")
    try:
        key, cert, extra = pkcs12.load_key_and_certificates(data, password)
    except ValueError as exc:
        raise s.error(
            f"ssl.{kind}.location", f"not a PKCS12 store or a wrong ssl.{kind}.password ({exc})"
        ) from None
    certs = ([cert] if cert is not None else []) + list(extra)
    chain = "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certs)
    key_pem = None
    if key is not None:
        key_pem = key.private_bytes(serialization.Encoding.PEM,
                                    serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())  # fmt: skip
    return key_pem, chain


def _load_keystore(ctx: ssl.SSLContext, s: _Settings) -> bool:
    """Load the key and chain into ``ctx``; False when no key store is configured."""
    location = s.get("ssl.keystore.location")
    inline_key, inline_chain = s.get("ssl.keystore.key"), s.get("ssl.keystore.certificate.chain")
    if location is None and inline_key is None and inline_chain is None:
        return False
    if location is not None and (inline_key is not None or inline_chain is not None):
        raise s.error(
            "ssl.keystore.location",
            "give either a key store file or "
            "ssl.keystore.key with ssl.keystore.certificate.chain, not both",
        )
    _store_type(s, "keystore", None)  # a JKS store refused before it is read
    data = _read(s, "ssl.keystore.location") if location is not None else None
    kind = _store_type(s, "keystore", data)
    key_password = s.password("ssl.key.password")
    if kind == "PKCS12":
        if data is None:
            raise s.error("ssl.keystore.type", "PKCS12 needs ssl.keystore.location")
        key_pem, chain = _pkcs12(s, "keystore", data)
        if key_pem is None:
            raise s.error("ssl.keystore.location", "the PKCS12 store holds no private key")
        pem, key_password = key_pem + chain.encode(), None
    elif data is not None:
        pem = data
    else:
        if inline_key is None or inline_chain is None:
            raise s.error(
                "ssl.keystore.key",
                "inline PEM needs both ssl.keystore.key and ssl.keystore.certificate.chain",
            )
        pem = (inline_key.strip() + "\n" + inline_chain.strip() + "\n").encode()
    with _memory_file(pem) as path:
        try:
            ctx.load_cert_chain(path, password=key_password or b"")
        except ssl.SSLError as exc:
            where = "ssl.keystore.location" if location else "ssl.keystore.key"
            raise s.error(
                where,
                f"no usable key and certificate chain (a wrong "
                f"ssl.key.password?): {exc.reason or exc}",
            ) from None
    return True


def _load_truststore(ctx: ssl.SSLContext, s: _Settings, purpose: ssl.Purpose) -> None:
    location = s.get("ssl.truststore.location")
    inline = s.get("ssl.truststore.certificates")
    if location is None and inline is None:
        ctx.load_default_certs(purpose)  # Kafka: the JVM's default trust store
        return
    data = _read(s, "ssl.truststore.location") if location is not None else inline.encode()  # type: ignore[union-attr]
    kind = _store_type(s, "truststore", data)
    pem = _pkcs12(s, "truststore", data)[1] if kind == "PKCS12" else data.decode("ascii", "replace")
    if "-----BEGIN CERTIFICATE-----" not in pem:
        raise s.error(
            "ssl.truststore.location" if location else "ssl.truststore.certificates",
            "no certificate in the trust store",
        )
    try:
        ctx.load_verify_locations(cadata=pem)
    except ssl.SSLError as exc:
        raise s.error("ssl.truststore.location", f"unreadable certificates: {exc}") from None


def _protocols(ctx: ssl.SSLContext, s: _Settings) -> None:
    text = s.get("ssl.enabled.protocols") or "TLSv1.2,TLSv1.3"
    found = []
    for name in (n.strip() for n in text.split(",") if n.strip()):
        version = PROTOCOLS.get(name)
        if version is None:
            raise s.error(
                "ssl.enabled.protocols",
                f"unknown protocol {name!r} (one of {', '.join(PROTOCOLS)})",
            )
        found.append(version)
    if not found:
        raise s.error("ssl.enabled.protocols", "no protocol")
    ctx.minimum_version, ctx.maximum_version = min(found), max(found)


def openssl_cipher_name(name: str) -> str:
    """OpenSSL's name of a TLS 1.2 suite given by its IANA (Java, Kafka) name
    (``TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256`` is ``ECDHE-RSA-AES128-GCM-SHA256``); other
    names unchanged (OpenSSL's own pass through)."""
    m = _IANA.match(name)
    if m is None:
        return name
    cipher, mac = m["cipher"], m["mac"]
    cipher = re.sub(r"AES_(\d+)", r"AES\1", cipher).replace("_CBC", "").replace("_", "-")
    if cipher.endswith("POLY1305"):
        mac = ""  # OpenSSL names ChaCha20-Poly1305 suites without the PRF hash
    return "-".join(p for p in (_KX[m["kx"]], cipher, mac) if p)


def _ciphers(ctx: ssl.SSLContext, s: _Settings) -> None:
    text = s.get("ssl.cipher.suites")
    if text is None:
        return
    names = [n.strip() for n in text.split(",") if n.strip()]
    tls12 = [openssl_cipher_name(n) for n in names if n not in _TLS13]
    if not tls12:
        return  # only TLS 1.3 suites named: the stdlib keeps them all (module doc)
    known = {c["name"] for c in ssl.create_default_context().get_ciphers()} | {
        c["name"] for c in _all_ciphers()
    }
    unknown = [n for n, o in zip([n for n in names if n not in _TLS13], tls12, strict=True)
               if o not in known]  # fmt: skip
    if unknown:
        raise s.error("ssl.cipher.suites", f"unknown or unavailable suites {', '.join(unknown)}")
    try:
        ctx.set_ciphers(":".join(tls12))
    except ssl.SSLError as exc:
        raise s.error("ssl.cipher.suites", f"{exc}") from None


def _all_ciphers() -> list[dict[str, str]]:
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with contextlib.suppress(ssl.SSLError):
        probe.set_ciphers("ALL:@SECLEVEL=0")
    return probe.get_ciphers()  # type: ignore[return-value]


def server_context(spec: ListenerSpec) -> ssl.SSLContext:
    """A server context for ``spec``'s ``ssl.*`` settings (module doc); TlsConfigError."""
    s = _Settings(spec)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE
    _protocols(ctx, s)
    _ciphers(ctx, s)
    if not _load_keystore(ctx, s):
        raise s.error(
            "ssl.keystore.location",
            f"a {spec.security_protocol} listener needs a "
            "key store (ssl.keystore.location, or ssl.keystore.key and "
            "ssl.keystore.certificate.chain)",
        )
    # KIP-684: on SASL_SSL only the listener's own ssl.client.auth counts (SASL authenticates)
    if spec.uses_sasl:
        auth = (spec.values.get(spec.prefix + "ssl.client.auth") or "none").lower()
    else:
        auth = (s.get("ssl.client.auth") or "none").lower()
    if auth not in CLIENT_AUTH:
        raise s.error("ssl.client.auth", f"{auth!r} is not none, requested or required")
    ctx.verify_mode = CLIENT_AUTH[auth]
    if ctx.verify_mode != ssl.CERT_NONE:
        _load_truststore(ctx, s, ssl.Purpose.CLIENT_AUTH)
    return ctx


def client_context(spec: ListenerSpec) -> ssl.SSLContext:
    """The context this broker connects to peers' ``spec`` listener with: their certificate
    verified against the trust store (host names checked unless
    ``ssl.endpoint.identification.algorithm`` is empty, as in Kafka), this broker's key store
    presented when one is configured (mTLS between brokers)."""
    s = _Settings(spec)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _protocols(ctx, s)
    _ciphers(ctx, s)
    _load_keystore(ctx, s)
    algorithm = spec.get("ssl.endpoint.identification.algorithm", "https")
    ctx.check_hostname = bool(algorithm)
    ctx.verify_mode = ssl.CERT_REQUIRED
    _load_truststore(ctx, s, ssl.Purpose.SERVER_AUTH)
    return ctx


class ServerTls:
    """A TLS listener's live context and how its clients are named (module doc)."""

    def __init__(self, spec: ListenerSpec) -> None:
        self.spec = spec
        self.context = server_context(spec)
        self.mapper = PrincipalMapper.from_config(spec.get("ssl.principal.mapping.rules"))
        self.fingerprint = self._fingerprint()

    def _fingerprint(self) -> tuple[str | None, ...]:
        """The reloadable settings' values (and the key store file's mtime: a renewed file at
        the same path is reloaded too, when a change names it again)."""
        values = tuple(self.spec.get(k) for k in RELOADED_KEYS)
        location = self.spec.get("ssl.keystore.location")
        mtime = None
        if location:
            with contextlib.suppress(OSError):
                mtime = str(os.stat(location).st_mtime_ns)
        return (*values, mtime)

    def reload(self, force: bool = False) -> bool:
        """Rebuild from the current settings when they changed (or ``force``); whether the
        live context changed. TlsConfigError leaves the live context as it was."""
        fingerprint = self._fingerprint()
        if fingerprint == self.fingerprint and not force:
            return False
        s = _Settings(self.spec)
        server_context(self.spec)  # every setting checked first: nothing changes on an error
        _load_keystore(self.context, s)
        if self.context.verify_mode != ssl.CERT_NONE:
            _load_truststore(self.context, s, ssl.Purpose.CLIENT_AUTH)
        self.fingerprint = fingerprint
        log.info("listener %s: key store and trust store reloaded", self.spec.name)
        return True

    def principal(self, ssl_object: ssl.SSLObject | ssl.SSLSocket | None) -> str:
        """``User:<name>`` of the verified client certificate after the mapping rules, or
        ``User:ANONYMOUS`` without one; PrincipalMappingError when no rule gives a name."""
        if ssl_object is None:
            return ANONYMOUS
        der = ssl_object.getpeercert(binary_form=True)
        if not der:
            return ANONYMOUS
        return "User:" + self.mapper.name(distinguished_name(der))
