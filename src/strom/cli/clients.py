"""The admin layer's session (and its producers and consumers) for one CLI run.

:func:`session` turns the parsed options into a :class:`strom.admin.session.Session` once per
run (kept on ``args``): the bootstrap servers (:mod:`strom.cli.connection`), ``--timeout``,
the ``-X`` properties, and librdkafka's log lines routed to Python ``logging`` unless ``-vv``
(so stderr stays one readable line on error; ``-vvv`` adds librdkafka's protocol debug).
"""

from __future__ import annotations

import argparse
from typing import Any

from confluent_kafka import Consumer, Producer

from strom.admin.client_security import WireSecurity, to_librdkafka
from strom.admin.session import DEFAULT_TIMEOUT_S, LIBRDKAFKA_LOG, ClientSettings, Session
from strom.admin.session import parse_properties as _parse_properties
from strom.admin.wire import use_security
from strom.cli.connection import resolve_bootstrap
from strom.cli.profile_store import current_profile

_SESSION = "admin_session"


def client_properties(args: argparse.Namespace) -> dict[str, str]:
    """The client properties of this run: the profile's (when it gives the address), then
    the ``-X K=V`` ones over them; Java client security names carried over to librdkafka's
    (:func:`strom.admin.client_security.to_librdkafka`)."""
    properties: dict[str, str] = {}
    resolve_bootstrap(args)
    if str(getattr(args, "bootstrap_source", "")).startswith("profile"):
        profile = current_profile(getattr(args, "profile", None))
        if profile is not None:
            properties.update(profile.properties)
    properties.update(_parse_properties(list(getattr(args, "client_config", []) or [])))
    return to_librdkafka(properties)


def settings(args: argparse.Namespace) -> ClientSettings:
    """The client settings the options of this run say."""
    verbose = getattr(args, "verbose", 0) or 0
    return ClientSettings(
        bootstrap=resolve_bootstrap(args),
        timeout=float(getattr(args, "timeout", None) or DEFAULT_TIMEOUT_S),
        properties=client_properties(args),
        logger=LIBRDKAFKA_LOG if verbose < 2 else None,
        debug="broker,protocol" if verbose >= 3 else None,
        # below -vv no client log line is shown, so librdkafka makes none below ERROR: an
        # info line written while a client is destroyed (issue 21 saw "%6|...BGQUEUE...
        # Purging") cannot reach stderr then, whatever path it takes
        log_level=3 if verbose < 2 else None,
    )


def session(args: argparse.Namespace) -> Session:
    """This run's session (made on first use)."""
    existing = getattr(args, _SESSION, None)
    if existing is None:
        existing = Session(settings(args))
        # strom's own wire requests of this run go out as the confluent-kafka clients do
        use_security(WireSecurity.from_properties(existing.settings.properties))
        setattr(args, _SESSION, existing)
    return existing  # type: ignore[no-any-return]


def checked_session(args: argparse.Namespace) -> Session:
    """This run's session, once the broker has answered a metadata request."""
    s = session(args)
    s.check()
    return s


def producer(args: argparse.Namespace, extra: dict[str, Any], **callbacks: Any) -> Producer:
    return session(args).producer(extra, **callbacks)


def consumer(args: argparse.Namespace, extra: dict[str, Any]) -> Consumer:
    return session(args).consumer(extra)
