"""The broker's client listener: the asyncio server that makes a :class:`KafkaConnection` per
accepted socket (a :class:`~strom.broker.sasl_connection.SaslConnection` on a SASL_PLAINTEXT /
SASL_SSL listener; on an SSL / SASL_SSL listener once the socket's TLS handshake succeeded,
:mod:`strom.broker.tls_handshake`, which logs and counts a failed one), and the drain of those
connections at shutdown."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from strom.broker.sasl_connection import SaslConnection
from strom.broker.server import KafkaConnection
from strom.broker.tls_handshake import HandshakeFailures, TlsAcceptor
from strom.security.sasl import SaslSettings, jwks

if TYPE_CHECKING:
    from strom.broker.services import BrokerServices
    from strom.security.listeners import ListenerSpec
    from strom.security.tls import ServerTls


#: the listeners' background tasks (JWKS refreshes), referenced while they run
_background: set[asyncio.Task[None]] = set()


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
                       spec: ListenerSpec, tls: ServerTls | None = None) -> asyncio.Server:  # fmt: skip
    """Listen as ``spec`` says (with ``tls``'s live context on an SSL / SASL_SSL listener);
    each accepted socket gets a :class:`KafkaConnection` of that listener once its TLS
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
    if spec.uses_sasl:
        # read once, at start: a bad SASL setting fails the start, naming the property
        sasl = SaslSettings.from_config(spec.values, spec.name, services.scram.lookup)
        if sasl.jwks is not None:  # OAUTHBEARER's key set: fetched before the first login
            url, refresh_ms, keys = sasl.jwks
            ok = await jwks.refresh(url, keys)
            refresher = (url, refresh_ms, keys, ok)

        def factory() -> KafkaConnection:
            return SaslConnection(services, connections, spec, sasl, failures, tls)
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
