"""The broker's client listener: the asyncio server that makes a :class:`KafkaConnection` per
accepted socket (a :class:`~strom.broker.sasl_connection.SaslConnection` on a SASL_PLAINTEXT /
SASL_SSL listener; on an SSL / SASL_SSL listener once the socket's TLS handshake succeeded,
:mod:`strom.broker.tls_handshake`, which logs and counts a failed one), and the drain of those
connections at shutdown."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from strom.broker.sasl_connection import SaslConnection
from strom.broker.server import KafkaConnection
from strom.broker.tls_handshake import HandshakeFailures, TlsAcceptor
from strom.security.sasl import SaslConfigError, SaslSettings, jwks
from strom.security.sasl.oauthbearer import JwksValidator

if TYPE_CHECKING:
    from strom.broker.services import BrokerServices
    from strom.security.listeners import ListenerSpec
    from strom.security.sasl.config import ScramLookup
    from strom.security.tls import ServerTls

log = logging.getLogger(__name__)

#: the listeners' background tasks (JWKS refreshes), referenced while they run
_background: set[asyncio.Task[None]] = set()

#: the broker-wide settings that change what a SASL listener accepts (besides its own
#: ``listener.name.<l>.`` ones, and ``sasl.*``)
_SASL_SETTINGS = ("connections.max.reauth.ms", "connection.failed.authentication.delay.ms")


class LiveSasl:
    """A SASL listener's settings, as its new connections authenticate against them: rebuilt
    when a dynamic config changes them (KIP-226: ``listener.name.<l>.<mechanism>.sasl.jaas.config``
    adds a PLAIN user without a restart; ``sasl.enabled.mechanisms``, the re-authentication
    interval). Connections already made keep the settings they started with.

    Invariant: ``settings`` was built from the listener's values whose :meth:`_fingerprint` is
    ``fingerprint``; a change that does not build (:meth:`check` refuses it) leaves both as they
    were. An OAUTHBEARER JWKS endpoint is fetched by a task started with the listener: its URL
    and refresh interval take effect at a restart (a change of them is refused)."""

    def __init__(self, spec: ListenerSpec, scram_lookup: ScramLookup | None) -> None:
        self.spec = spec
        self.scram_lookup = scram_lookup
        self.settings = SaslSettings.from_config(spec.values, spec.name, scram_lookup)
        self.fingerprint = self._fingerprint(spec.values)

    def _fingerprint(self, values: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
        prefix = self.spec.prefix

        def ours(key: str) -> bool:
            if key.startswith("listener.name."):
                if not key.startswith(prefix):
                    return False  # another listener's
                key = key[len(prefix):]  # perhaps <mechanism>.<key>
            return key.startswith("sasl.") or ".sasl." in key or key.endswith(_SASL_SETTINGS)

        return tuple(sorted((k, v) for k, v in values.items() if ours(k)))

    def check(self, values: Mapping[str, str]) -> SaslSettings:
        """The settings ``values`` give this listener; SaslConfigError if they cannot be served
        (as at start-up, or a new JWKS endpoint)."""
        settings = SaslSettings.from_config(values, self.spec.name, self.scram_lookup)
        old = self.settings.jwks
        new = settings.jwks
        if new is not None or old is not None:
            if old is None or new is None or new[:2] != old[:2]:
                raise SaslConfigError(
                    f"listener {self.spec.name}: the OAUTHBEARER JWKS endpoint and its refresh "
                    "interval take effect at a restart")  # fmt: skip
            settings.jwks = old  # the key set the listener's task keeps fresh
            if isinstance(settings.oauth_validator, JwksValidator):
                settings.oauth_validator.keys = old[2]
        return settings

    def reload(self) -> bool:
        """Rebuild from the listener's current values if its SASL settings changed; whether
        they did. SaslConfigError leaves the settings as they were."""
        fingerprint = self._fingerprint(self.spec.values)
        if fingerprint == self.fingerprint:
            return False
        self.settings = self.check(self.spec.values)
        self.fingerprint = fingerprint
        log.info("listener %s: SASL settings reloaded (mechanisms %s)", self.spec.name,
                 ", ".join(self.settings.mechanisms))  # fmt: skip
        return True


async def drain(connections: set[KafkaConnection], timeout: float, grace: float = 0.1) -> None:
    """Close each connection once it is idle (between requests, every answer written) and has
    answered a request since now, or, if it sends none, after ``grace`` s; at most ``timeout``
    s from now (the caller closes what is left).

    Why, at shutdown after a controlled shutdown made this broker a follower: its waiting
    acks=all Produce requests are answered as soon as its new leader's HW covers their records
    (or its truncation removed them), and the requests an active producer sends next are
    refused NOT_LEADER_OR_FOLLOWER, each naming the new leader (KIP-951),
    so the producer moves at once. Closing the connection under them, or before the next
    request, leaves the producer to notice a dead connection and ask for metadata (librdkafka:
    up to its 1 s refresh of partitions whose leader is down)."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    before = {conn: conn.handled for conn in connections}
    while connections and loop.time() < start + timeout:
        late = loop.time() >= start + grace
        for conn in [c for c in connections if c.idle]:
            if late or conn.handled > before.get(conn, 0):
                conn.close()
        await asyncio.sleep(0.005)


async def start_server(services: BrokerServices, connections: set[KafkaConnection],
                       spec: ListenerSpec, tls: ServerTls | None = None,
                       sasl: LiveSasl | None = None) -> asyncio.Server:  # fmt: skip
    """Listen as ``spec`` says (with ``tls``'s live context on an SSL / SASL_SSL listener);
    each accepted socket gets a :class:`KafkaConnection` of that listener (a SASL listener's,
    authenticating against ``sasl``'s settings of the moment) once its TLS
    handshake succeeded (a failed one never reaches the connection: nothing is read from it;
    it is logged and counted in ``failed_authentication``), kept in ``connections`` while
    open."""
    loop = asyncio.get_running_loop()
    metrics = services.metrics
    metrics.connections_created.setdefault(spec.name, 0)
    metrics.connections_closed.setdefault(spec.name, 0)
    if spec.uses_sasl or tls is not None:  # the listener's failed authentications: from 0
        metrics.failed_authentication.setdefault(spec.name, 0)
    # one rate limit for the listener's TLS and SASL failures (auth_failures' module doc)
    failures = HandshakeFailures(spec.name, lambda: metrics.authentication_failed(spec.name))
    factory: Callable[[], KafkaConnection]
    refresher = None
    if spec.uses_sasl and sasl is None:  # never a SASL listener without its gate
        sasl = LiveSasl(spec, services.scram.lookup)
    if sasl is not None:
        live = sasl
        if live.settings.jwks is not None:  # OAUTHBEARER's key set: fetched before the 1st login
            url, refresh_ms, keys = live.settings.jwks
            ok = await jwks.refresh(url, keys)
            refresher = (url, refresh_ms, keys, ok)

        def factory() -> KafkaConnection:  # the settings in force when the client connects
            return SaslConnection(services, connections, spec, live.settings, failures, tls)
    else:
        def factory() -> KafkaConnection:
            return KafkaConnection(services, connections, spec, tls)
    accept: Callable[[], asyncio.Protocol] = factory
    if tls is not None:  # the handshake is run here, not by create_server(ssl=): its failures
        # are logged and counted (tls_handshake's module doc)

        def accept() -> asyncio.Protocol:
            return TlsAcceptor(factory, lambda: tls.context, failures)
    server = await loop.create_server(accept, spec.bind_host, spec.port, reuse_address=True,
                                      backlog=1024)  # fmt: skip
    if refresher is not None:  # kept current while the listener serves
        url, refresh_ms, keys, ok = refresher
        task = loop.create_task(jwks.keep_fresh(url, refresh_ms, keys, server.is_serving, ok))
        _background.add(task)
        task.add_done_callback(_background.discard)
    return server
