"""Client security settings: Kafka's Java client names carried over to librdkafka's, and TLS
for strom's own wire connections.

strom's tools talk to brokers through confluent-kafka (librdkafka) and, for a few requests,
through :class:`strom.admin.wire.WireConnection`. Users bring settings written for Kafka's
Java clients (a Connect worker's ``producer.ssl.truststore.location``, a Spark job's
``kafka.sasl.jaas.config``) or for librdkafka (``ssl.ca.location``, ``sasl.username``).

:func:`to_librdkafka` translates the Java names librdkafka does not have and passes every
other key through untouched (librdkafka then refuses what it does not know, in one line):

===============================================  =================================================
Java client                                      librdkafka
===============================================  =================================================
``sasl.jaas.config`` with ``PlainLoginModule``   ``sasl.username``, ``sasl.password``
or ``ScramLoginModule`` (``username``,
``password``)
``sasl.mechanism``                               ``sasl.mechanism`` (the same name)
``ssl.truststore.location`` (PEM)                ``ssl.ca.location``
``ssl.truststore.location`` (PKCS12)             ``ssl.ca.pem`` (certificates read through
                                                 ``cryptography``)
``ssl.truststore.certificates`` (KIP-651)        ``ssl.ca.pem``
``ssl.keystore.location`` (``ssl.keystore.type``  ``ssl.key.pem`` + ``ssl.certificate.pem``
=PEM: key and chain in one file)
``ssl.keystore.certificate.chain`` /             ``ssl.certificate.pem`` / ``ssl.key.pem``
``ssl.keystore.key``
``ssl.keystore.location`` (PKCS12)               the same name (librdkafka reads PKCS12)
``ssl.endpoint.identification.algorithm=``       ``...=none``
(empty)
===============================================  =================================================

``ssl.truststore.type``, ``ssl.keystore.type``, ``ssl.truststore.password``, ``ssl.protocol``
and ``ssl.enabled.protocols`` are used by the translation and not passed on, nor are the
server-side and JVM-only keys (``ssl.client.auth``, ``ssl.keymanager.algorithm`` ...). A JKS store is
refused with a line saying to convert it (Java's own format).

:class:`WireSecurity` is what a :class:`~strom.admin.wire.WireConnection` needs from the
librdkafka settings: ``security.protocol`` SSL gets a TLS context (``ssl.ca.location`` /
``ssl.ca.pem``, the client's ``ssl.certificate.*`` + ``ssl.key.*`` or PKCS12
``ssl.keystore.*``, ``enable.ssl.certificate.verification``,
``ssl.endpoint.identification.algorithm``); SASL_PLAINTEXT / SASL_SSL authenticate each new
connection before its first request, as librdkafka does — SaslHandshake v1, then
SaslAuthenticate v2 until the exchange ends — with ``sasl.mechanism`` PLAIN, SCRAM-SHA-256 or
SCRAM-SHA-512 and ``sasl.username`` / ``sasl.password`` (or the Java client's
``sasl.jaas.config``), through :class:`strom.security.sasl.client.SaslClient`. Other
mechanisms (GSSAPI, OAUTHBEARER) are refused in one line: confluent-kafka's clients have them.
"""

from __future__ import annotations

import re
import socket
import ssl
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strom.admin.errors import InvalidInputError
from strom.protocol.messages import RequestHeader, build, decode_response, encode_request
from strom.protocol.messages import request_class as message_class
from strom.security.sasl.client import ClientCredentials, SaslClient
from strom.security.web_tls import TlsConfigError, client_context

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
LOGIN_MODULES = ("org.apache.kafka.common.security.plain.PlainLoginModule",
                 "org.apache.kafka.common.security.scram.ScramLoginModule")
_JAAS = re.compile(r'^\s*(\S+)\s+(required|requisite|sufficient|optional)\s*(.*?);?\s*$', re.S)
_OPTION = re.compile(r'([\w.\-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;"]+))')
#: Java-only keys consumed by the translation
_CONSUMED = ("ssl.truststore.type", "ssl.keystore.type", "ssl.truststore.password",
             "ssl.truststore.location", "ssl.truststore.certificates",
             "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.protocol",
             "ssl.enabled.protocols", "sasl.jaas.config",
             # server-side and JVM-only keys (a Connect worker's REST listener uses them)
             "ssl.client.auth", "ssl.keymanager.algorithm", "ssl.trustmanager.algorithm",
             "ssl.secure.random.implementation", "ssl.provider", "ssl.engine.factory.class",
             "ssl.principal.mapping.rules")


def _read(path: str, key: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise InvalidInputError(f"{key}: cannot read {path}: {exc.strerror or exc}") from None


def _store_type(props: Mapping[str, str], key: str, default: str) -> str:
    kind = (props.get(key) or default).strip().upper()
    if kind == "JKS":
        raise InvalidInputError(f"{key}=JKS is Java's own format: convert the store to PKCS12 "
                                f"or PEM (keytool -importkeystore -deststoretype PKCS12)")
    return kind


def _pkcs12_certificates(data: bytes, password: str | None) -> str:
    """The certificates of a PKCS12 trust store as PEM (``cryptography``)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    try:
        store = pkcs12.load_pkcs12(data, password.encode() if password else None)
    except ValueError as exc:
        raise InvalidInputError(f"ssl.truststore.location: not a PKCS12 store or a wrong "
                                f"ssl.truststore.password ({exc})") from None
    certs = [c.certificate for c in store.additional_certs]
    if store.cert is not None:
        certs.append(store.cert.certificate)
    if not certs:
        raise InvalidInputError("ssl.truststore.location: the PKCS12 store holds no certificate")
    return "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certs)


def jaas_credentials(text: str) -> tuple[str, str]:
    """(username, password) of a ``PlainLoginModule``/``ScramLoginModule`` JAAS line."""
    m = _JAAS.match(text)
    if m is None or m.group(1) not in LOGIN_MODULES:
        module = m.group(1) if m else text.strip()[:60]
        raise InvalidInputError(f"sasl.jaas.config: {module} is not supported by strom's "
                                f"clients (PlainLoginModule or ScramLoginModule with username "
                                f"and password; or librdkafka's sasl.username/sasl.password)")
    options = {o.group(1): re.sub(r"\\(.)", r"\1", o.group(2)) if o.group(2) is not None
               else o.group(3) for o in _OPTION.finditer(m.group(3))}
    if "username" not in options or "password" not in options:
        raise InvalidInputError("sasl.jaas.config: username and password are required")
    return options["username"], options["password"]


def to_librdkafka(props: Mapping[str, str]) -> dict[str, str]:
    """``props`` with Kafka's Java client security names carried over (module doc)."""
    out = {k: v for k, v in props.items() if k not in _CONSUMED}
    if props.get("sasl.jaas.config", "").strip():
        user, password = jaas_credentials(props["sasl.jaas.config"])
        out.setdefault("sasl.username", user)
        out.setdefault("sasl.password", password)
    if props.get("ssl.truststore.certificates", "").strip():
        out["ssl.ca.pem"] = props["ssl.truststore.certificates"]
    elif props.get("ssl.truststore.location", "").strip():
        location = props["ssl.truststore.location"].strip()
        if _store_type(props, "ssl.truststore.type", "PEM") == "PKCS12":
            out["ssl.ca.pem"] = _pkcs12_certificates(
                _read(location, "ssl.truststore.location"), props.get("ssl.truststore.password"))
        else:
            out["ssl.ca.location"] = location
    if props.get("ssl.keystore.certificate.chain", "").strip():
        out["ssl.certificate.pem"] = props["ssl.keystore.certificate.chain"]
        out["ssl.key.pem"] = props.get("ssl.keystore.key", "")
    elif props.get("ssl.keystore.location", "").strip() and _store_type(
            props, "ssl.keystore.type", "PKCS12") == "PEM":
        text = _read(props["ssl.keystore.location"], "ssl.keystore.location").decode("ascii",
                                                                                     "replace")
        blocks = re.findall(r"-----BEGIN ([A-Z ]+)-----.*?-----END \1-----", text, re.S)
        whole = re.findall(r"-----BEGIN [A-Z ]+-----.*?-----END [A-Z ]+-----", text, re.S)
        keys = [b for kind, b in zip(blocks, whole, strict=True) if "PRIVATE KEY" in kind]
        certs = [b for kind, b in zip(blocks, whole, strict=True) if kind == "CERTIFICATE"]
        if not keys or not certs:
            raise InvalidInputError("ssl.keystore.location: a PEM key store holds the private "
                                    "key and the certificate chain")
        del out["ssl.keystore.location"]
        out["ssl.key.pem"] = keys[0]
        out["ssl.certificate.pem"] = "\n".join(certs)
    if "ssl.endpoint.identification.algorithm" in props and \
            not props["ssl.endpoint.identification.algorithm"].strip():
        out["ssl.endpoint.identification.algorithm"] = "none"
    return out


class AuthenticationError(ConnectionError):
    """The broker refused this connection's SASL login (or its proof did not check out)."""


#: what strom's own connections can authenticate with (librdkafka's default is GSSAPI)
WIRE_SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
#: the largest SASL answer a client reads (a SCRAM challenge is a few hundred bytes)
_MAX_SASL_ANSWER = 1 << 20


@dataclass(frozen=True)
class WireSecurity:
    """How a :class:`~strom.admin.wire.WireConnection` secures its socket (module doc)."""

    protocol: str = "PLAINTEXT"
    context: ssl.SSLContext | None = None
    sasl: ClientCredentials | None = None

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> WireSecurity:
        """From librdkafka settings (Java names are translated first)."""
        conf = to_librdkafka(props)
        protocol = (conf.get("security.protocol") or "PLAINTEXT").strip().upper()
        if protocol not in PROTOCOLS:
            raise InvalidInputError(f"security.protocol: expected one of {', '.join(PROTOCOLS)},"
                                    f" got {protocol!r}")
        context = _client_context(conf) if protocol in ("SSL", "SASL_SSL") else None
        sasl = _sasl_credentials(protocol, conf) if protocol.startswith("SASL") else None
        return cls(protocol, context, sasl)

    def wrap(self, sock: socket.socket, host: str) -> socket.socket:
        """The socket secured as ``security.protocol`` says: TLS, then the SASL exchange
        (ConnectionError when the broker refuses either)."""
        if self.protocol.startswith("SASL") and self.sasl is None:
            sock.close()
            raise InvalidInputError(f"security.protocol={self.protocol} needs sasl.mechanism, "
                                    "sasl.username and sasl.password")  # fmt: skip
        if self.context is not None:
            try:
                sock = self.context.wrap_socket(sock, server_hostname=host)
            except (ssl.SSLError, ssl.CertificateError) as exc:
                sock.close()
                raise ConnectionError(f"TLS handshake with {host} failed: "
                                      f"{getattr(exc, 'reason', None) or exc}") from None
        if self.sasl is not None:
            try:
                _authenticate(sock, self.sasl)
            except BaseException:
                sock.close()
                raise
        return sock


def _sasl_credentials(protocol: str, conf: Mapping[str, str]) -> ClientCredentials:
    mechanism = (conf.get("sasl.mechanism") or conf.get("sasl.mechanisms") or "GSSAPI")
    mechanism = mechanism.strip().upper()
    if mechanism not in WIRE_SASL_MECHANISMS:
        raise InvalidInputError(f"sasl.mechanism={mechanism}: strom's own connections "
                                f"authenticate with {', '.join(WIRE_SASL_MECHANISMS)} "
                                "(confluent-kafka's clients have the others)")  # fmt: skip
    username, password = conf.get("sasl.username", ""), conf.get("sasl.password", "")
    if not username:
        raise InvalidInputError(f"security.protocol={protocol} with {mechanism} needs "
                                "sasl.username and sasl.password")  # fmt: skip
    return ClientCredentials(mechanism, username, password)


def _authenticate(sock: socket.socket, creds: ClientCredentials) -> None:
    """SaslHandshake v1 and SaslAuthenticate v2 on a new blocking connection, as librdkafka
    does before its first request; ConnectionError when the broker refuses."""
    correlation = 0

    def call(api_key: int, version: int, **fields: Any) -> Any:
        nonlocal correlation
        correlation += 1
        header = RequestHeader(api_key, version, correlation, "strom-sasl")
        sock.sendall(encode_request(header, build(message_class(api_key, version), **fields)))
        size = struct.unpack(">i", _recv_exact(sock, 4))[0]
        if not 0 <= size <= _MAX_SASL_ANSWER:
            raise ConnectionError(f"a {size}-byte answer to a SASL request")
        return decode_response(api_key, version, _recv_exact(sock, size))[1]

    answer = call(17, 1, mechanism=creds.mechanism)
    if answer.error_code:
        raise AuthenticationError(f"the broker does not accept SASL {creds.mechanism} here "
                              f"(it offers {', '.join(answer.mechanisms) or 'none'})")  # fmt: skip
    client = SaslClient(creds)
    token: bytes | None = client.first()
    try:
        while token is not None:
            answer = call(36, 2, auth_bytes=token)
            if answer.error_code:
                raise AuthenticationError(f"SASL authentication as {creds.username!r} failed: "
                                          f"{answer.error_message or answer.error_code}")  # fmt: skip
            token = client.step(bytes(answer.auth_bytes))
    except ValueError as exc:  # the server's SCRAM answers did not check out
        raise AuthenticationError(f"SASL authentication as {creds.username!r} failed: {exc}") from None


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < n:
        chunk = sock.recv(n - len(chunks))
        if not chunk:
            raise ConnectionError("the broker closed the connection during authentication")
        chunks += chunk
    return bytes(chunks)


def _client_context(conf: Mapping[str, str]) -> ssl.SSLContext:
    """librdkafka's TLS settings as the Java names strom's TLS contexts read
    (:func:`strom.security.web_tls.client_context`), then librdkafka's own switches."""
    java: dict[str, str] = {}
    ca_location = (conf.get("ssl.ca.location") or "").strip()
    capath = None
    if conf.get("ssl.ca.pem", "").strip():
        java["ssl.truststore.certificates"] = conf["ssl.ca.pem"]
    elif ca_location and ca_location != "probe":
        if Path(ca_location).is_dir():
            capath = ca_location  # a hashed directory: OpenSSL reads it as it goes
        else:
            java.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": ca_location})
    if conf.get("ssl.certificate.pem", "").strip():
        java["ssl.keystore.certificate.chain"] = conf["ssl.certificate.pem"]
        java["ssl.keystore.key"] = conf.get("ssl.key.pem", "")
    elif conf.get("ssl.certificate.location", "").strip():
        cert = conf["ssl.certificate.location"]
        java["ssl.keystore.certificate.chain"] = _read(
            cert, "ssl.certificate.location").decode("ascii", "replace")
        java["ssl.keystore.key"] = _read(conf.get("ssl.key.location") or cert,
                                         "ssl.key.location").decode("ascii", "replace")
    elif conf.get("ssl.keystore.location", "").strip():
        java.update({"ssl.keystore.type": "PKCS12",
                     "ssl.keystore.location": conf["ssl.keystore.location"],
                     "ssl.keystore.password": conf.get("ssl.keystore.password", "")})
    if conf.get("ssl.key.password"):
        java["ssl.key.password"] = conf["ssl.key.password"]
    algorithm = conf.get("ssl.endpoint.identification.algorithm", "https").strip().lower()
    java["ssl.endpoint.identification.algorithm"] = "" if algorithm == "none" else "https"
    try:
        ctx = client_context(java, "client")
        if capath is not None:
            ctx.load_verify_locations(capath=capath)
    except (TlsConfigError, ssl.SSLError, OSError) as exc:
        raise InvalidInputError(f"client TLS settings: {exc}") from None
    if conf.get("enable.ssl.certificate.verification", "true").strip().lower() == "false":
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx
