"""TLS for strom's HTTP listeners (Connect's REST API, the console, the metrics listener),
configured with Kafka's ``ssl.*`` names.

The contexts are the brokers' own (:mod:`strom.security.tls`: PEM or PKCS12 key and trust
stores, inline KIP-651 PEM, ``ssl.key.password``, ``ssl.client.auth``,
``ssl.enabled.protocols``, ``ssl.cipher.suites``), built from the settings given here without
their prefix (the caller strips ``listeners.https.`` or ``strom.admin.listener.``) as if they
were one SSL listener's, named ``name`` in error messages. With ``ssl.client.auth`` requested
or required and no trust store, client certificates are checked against the system's CAs,
as a broker's listener does.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Any

from strom.security.listeners import SSL, ListenerSpec
from strom.security.tls import TlsConfigError
from strom.security.tls import client_context as _listener_client_context
from strom.security.tls import server_context as _listener_server_context

__all__ = ["TlsConfigError", "client_context", "serve_with", "server_context"]


def _spec(conf: Mapping[str, str], name: str) -> ListenerSpec:
    return ListenerSpec(name, "", 0, SSL, dict(conf))


def server_context(conf: Mapping[str, str], name: str = "https") -> ssl.SSLContext:
    """The server side: the key store, client certificates checked per ``ssl.client.auth``."""
    return _listener_server_context(_spec(conf, name))


def client_context(conf: Mapping[str, str], name: str = "https") -> ssl.SSLContext:
    """The client side (one Connect worker calling another): the server checked against the
    trust store (the system's CAs without one), the key store presented when configured;
    ``ssl.endpoint.identification.algorithm`` empty turns host name checking off, as Kafka."""
    return _listener_client_context(_spec(conf, name))


def serve_with(config: Any, context: ssl.SSLContext | None) -> Any:
    """A uvicorn ``Config`` made to serve TLS with ``context`` (None: plain HTTP).

    uvicorn builds its own context from certificate files only; loading the config first
    and setting its ``ssl`` afterwards hands it ours (PKCS12, inline PEM, client auth)."""
    if context is not None:
        config.load()
        config.ssl = context
    return config
