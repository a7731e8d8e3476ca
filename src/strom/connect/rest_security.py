"""Who may use a worker's REST API: Kafka Connect's basic auth extension, and HTTPS.

Configured with Kafka Connect's names, so a worker file written for Kafka works unchanged:

- ``listeners=https://host:port`` serves HTTPS; the TLS keys are the ``listeners.https.``
  prefixed ``ssl.*`` ones when any is given, else the worker's own ``ssl.*`` (Kafka Connect's
  all-or-nothing rule), see :mod:`strom.security.web_tls`. ``ssl.client.auth=required`` asks
  every caller for a certificate signed by the trust store (mTLS).
- ``rest.extension.classes=org.apache.kafka.connect.rest.basic.auth.extension.
  BasicAuthSecurityRestExtension`` turns HTTP basic auth on, with users from the JAAS login
  configuration's ``KafkaConnect`` entry::

      KafkaConnect {
          org.apache.kafka.connect.rest.basic.auth.extension.PropertyFileLoginModule required
          file="/etc/connect/users.properties";
      };

  The JAAS file is named as the JVM is told: ``-Djava.security.auth.login.config=PATH`` in
  ``KAFKA_OPTS`` (the environment Kafka's scripts read), or the worker property
  ``java.security.auth.login.config`` (strom has no JVM system properties). The users file is
  a Java properties file of ``user: password`` lines, read once at start, as Kafka does. An
  empty users file lets everyone in (Kafka's rule), said in a WARNING at start.

As Kafka's ``JaasBasicAuthFilter``: a request without valid credentials gets 401 and
``User cannot access the resource.``; the two worker-to-worker requests (``POST
/connectors/<name>/tasks``, ``PUT /connectors/<name>/fence``) pass without credentials
(Kafka checks those with its inter-worker request signatures, which strom does not have: see
docs/security-tools.md). A request one worker forwards to another carries the caller's
``Authorization`` header along, as Kafka's ``RestClient`` does.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import logging
import os
import re
import shlex
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from strom.connect.worker_config import WorkerConfigError, parse_properties
from strom.security.web_tls import TlsConfigError, client_context, server_context

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

LOG = logging.getLogger("strom.connect.rest")

BASIC_AUTH_EXTENSION = ("org.apache.kafka.connect.rest.basic.auth.extension."
                        "BasicAuthSecurityRestExtension")
LOGIN_MODULE = "org.apache.kafka.connect.rest.basic.auth.extension.PropertyFileLoginModule"
JAAS_PROPERTY = "java.security.auth.login.config"
JAAS_ENTRY = "KafkaConnect"
UNAUTHORIZED = "User cannot access the resource."
#: worker-to-worker requests Kafka's filter lets through without credentials
INTERNAL = (("POST", re.compile(r"^/?connectors/[^/]+/tasks/?$")),
            ("PUT", re.compile(r"^/?connectors/[^/]+/fence/?$")))


@dataclass(frozen=True)
class JaasModule:
    name: str
    flag: str
    options: dict[str, str]


_JAAS_TOKEN = re.compile(r'\s*(?:(?P<str>"(?:[^"\\]|\\.)*")|(?P<punct>[{};=])|'
                         r'(?P<word>[^\s{};="]+))')


def _jaas_tokens(text: str) -> list[str]:
    # comments as Java's ConfigFile: // to the end of a line, /* ... */
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    tokens: list[str] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _JAAS_TOKEN.match(text, pos)
        if m is None:
            raise WorkerConfigError(f"JAAS configuration: cannot parse near {text[pos:pos+30]!r}")
        tokens.append(m.group(0).strip())
        pos = m.end()
    return tokens


def parse_jaas_file(text: str) -> dict[str, list[JaasModule]]:
    """The entries of a JAAS login configuration file: ``Name { module flag k="v" ...; };``."""
    tokens = _jaas_tokens(text)
    entries: dict[str, list[JaasModule]] = {}
    i = 0

    def take() -> str:
        nonlocal i
        if i >= len(tokens):
            raise WorkerConfigError("JAAS configuration: unexpected end of file")
        i += 1
        return tokens[i - 1]

    while i < len(tokens):
        name = take()
        if take() != "{":
            raise WorkerConfigError(f"JAAS configuration: expected '{{' after {name}")
        modules: list[JaasModule] = []
        while (tok := take()) != "}":
            flag = take().lower()
            if flag not in ("required", "requisite", "sufficient", "optional"):
                raise WorkerConfigError(f"JAAS configuration: {tok}: invalid control flag "
                                        f"{flag!r}")
            options: dict[str, str] = {}
            while (key := take()) != ";":
                if take() != "=":
                    raise WorkerConfigError(f"JAAS configuration: expected '=' after {key}")
                value = take()
                if value.startswith('"'):
                    value = re.sub(r"\\(.)", r"\1", value[1:-1])
                options[key] = value
            modules.append(JaasModule(tok, flag, options))
        if i < len(tokens) and tokens[i] == ";":
            i += 1
        entries[name] = modules
    return entries


def jaas_location(worker: dict[str, str], environ: dict[str, str] | None = None) -> str | None:
    """The JAAS file: the worker property, else ``-D...`` in ``KAFKA_OPTS``."""
    if worker.get(JAAS_PROPERTY, "").strip():
        return worker[JAAS_PROPERTY].strip()
    opts = (os.environ if environ is None else environ).get("KAFKA_OPTS", "")
    for word in shlex.split(opts):
        if word.startswith(f"-D{JAAS_PROPERTY}="):
            return word.split("=", 1)[1]
    return None


class BasicAuth:
    """The users of a ``PropertyFileLoginModule``: name -> password, as the file says."""

    def __init__(self, users: dict[str, str], source: str) -> None:
        self.users = users
        self.source = source

    @classmethod
    def from_jaas(cls, jaas_path: str) -> BasicAuth:
        try:
            text = Path(jaas_path).read_text(encoding="utf-8")
        except OSError as exc:
            raise WorkerConfigError(f"{JAAS_PROPERTY}: cannot read {jaas_path}: "
                                    f"{exc.strerror or exc}") from None
        entry = parse_jaas_file(text).get(JAAS_ENTRY)
        if not entry:
            raise WorkerConfigError(f"{jaas_path}: no {JAAS_ENTRY} entry (the basic auth "
                                    f"extension reads its users from that login context)")
        modules = [m for m in entry if m.name == LOGIN_MODULE]
        if len(modules) != len(entry):
            others = ", ".join(m.name for m in entry if m.name != LOGIN_MODULE)
            raise WorkerConfigError(f"{jaas_path}: unsupported login module(s) {others}; "
                                    f"strom supports {LOGIN_MODULE}")
        users: dict[str, str] = {}
        for module in modules:
            path = module.options.get("file", "").strip()
            if not path:
                raise WorkerConfigError(f"{jaas_path}: Property Credentials file must be "
                                        f"specified (file=\"...\")")
            try:
                users.update(parse_properties(Path(path).read_text(encoding="utf-8")))
            except OSError as exc:
                raise WorkerConfigError(f"Error loading Property Credentials file {path}: "
                                        f"{exc.strerror or exc}") from None
        source = ", ".join(m.options["file"] for m in modules)
        if not users:
            LOG.warning("credential properties file %s is empty: all requests will be "
                        "permitted (Kafka Connect's rule)", source)
        return cls(users, source)

    def check(self, authorization: str | None) -> str | None:
        """The user name if ``authorization`` (the header) holds valid credentials."""
        if not self.users:
            return ""
        if not authorization:
            return None
        method, _, encoded = authorization.partition(" ")
        if method.lower() != "basic":
            return None
        try:
            decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None
        user, sep, password = decoded.partition(":")
        if not sep or not user:
            return None
        expected = self.users.get(user)
        if expected is None:
            return None
        return user if hmac.compare_digest(password.encode(), expected.encode()) else None


class BasicAuthMiddleware:
    """ASGI: 401 unless the request carries valid basic credentials (internal ones exempt)."""

    def __init__(self, app: ASGIApp, auth: BasicAuth) -> None:
        self.app = app
        self.auth = auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self._internal(scope):
            await self.app(scope, receive, send)
            return
        header = None
        for key, value in scope["headers"]:
            if key == b"authorization":
                header = value.decode("latin-1")
        if self.auth.check(header) is None:
            from starlette.responses import PlainTextResponse

            response = PlainTextResponse(UNAUTHORIZED, status_code=401,
                                         headers={"WWW-Authenticate": 'Basic realm="KafkaConnect"'})
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)

    @staticmethod
    def _internal(scope: Scope) -> bool:
        return any(scope["method"] == method and pattern.match(scope["path"])
                   for method, pattern in INTERNAL)


@dataclass
class RestSecurity:
    """A worker's REST security, read from its properties before anything starts."""

    scheme: str  # "http" or "https"
    server_ssl: ssl.SSLContext | None
    client_ssl: ssl.SSLContext | None  # for worker-to-worker requests over https
    basic_auth: BasicAuth | None

    def describe(self, host: str, port: int) -> str:
        """The start-up line: where, and who may use it."""
        where = f"{self.scheme}://{host}:{port}"
        parts = []
        if self.basic_auth is not None:
            parts.append(f"basic auth (users from {self.basic_auth.source})")
        if self.server_ssl is not None and self.server_ssl.verify_mode == ssl.CERT_REQUIRED:
            parts.append("client certificates required")
        if parts:
            return f"REST API on {where}: " + ", ".join(parts)
        return (f"REST API on {where} without a login (no rest.extension.classes, no client "
                f"certificates): anyone who can reach {host}:{port} may change connectors")


def tls_settings(worker: dict[str, str]) -> dict[str, str]:
    """The ssl.* settings of the https listener (``listeners.https.`` ones, else the worker's)."""
    prefix = "listeners.https."
    prefixed = {k[len(prefix):]: v for k, v in worker.items() if k.startswith(prefix)}
    if prefixed:
        return prefixed
    return {k: v for k, v in worker.items() if k.startswith("ssl.")}


def rest_security(worker: dict[str, str]) -> RestSecurity:
    """Reads the worker's REST security settings (WorkerConfigError, one line, if unusable)."""
    listeners = worker.get("listeners", "").strip()
    scheme = urlparse(listeners.split(",")[0].strip()).scheme if listeners else "http"
    server_ssl = client_ssl = None
    if scheme == "https":
        conf = tls_settings(worker)
        try:
            server_ssl = server_context(conf, "https")
            client_ssl = client_context(conf, "https")
        except TlsConfigError as exc:
            raise WorkerConfigError(f"listeners.https: {exc}") from None
    extensions = [c.strip() for c in worker.get("rest.extension.classes", "").split(",")
                  if c.strip()]
    unknown = [c for c in extensions if c != BASIC_AUTH_EXTENSION]
    if unknown:
        raise WorkerConfigError(f"rest.extension.classes: unsupported {', '.join(unknown)} "
                                f"(strom supports {BASIC_AUTH_EXTENSION})")
    basic = None
    if extensions:
        location = jaas_location(worker)
        if location is None:
            raise WorkerConfigError(f"{BASIC_AUTH_EXTENSION} needs a JAAS file: set "
                                    f"-D{JAAS_PROPERTY}=PATH in KAFKA_OPTS or {JAAS_PROPERTY} "
                                    f"in the worker properties")
        basic = BasicAuth.from_jaas(location)
    return RestSecurity(scheme or "http", server_ssl, client_ssl, basic)
