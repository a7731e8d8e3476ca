"""Liveness and readiness: a list of named checks, each true or false right now.

``/health/live`` answers 200 while the process and its event loop run (a loop stuck in a
handler cannot answer at all, which is what a liveness probe wants to see). ``/health/ready``
runs every readiness check and answers 200 when all pass, else 503; the JSON body names each
check and lists the failing ones::

    {"status": "ready" | "not ready", "failing": ["logs_loaded"],
     "checks": {"listener": true, "logs_loaded": false, ...}}

Built-in checks: ``started`` (start-up finished, shutdown not begun), ``logs_loaded`` (every
partition log recovered and opened), ``listener`` (the Kafka listener accepts connections),
``coordinators_loaded`` (the group and transaction coordinators replayed their topics),
``controller_known`` (a single node is its own controller; a cluster member needs its
metadata-store session connected and a controller in office) and ``no_offline_partitions``
(no partition hosted here is without a leader, none the controller gave this broker to lead is
still unled here): both from :mod:`strom.broker.observability.cluster_state`. More checks plug
in with :meth:`Health.add`.
A check that raises counts as failing (and is logged once per failure streak).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any, Protocol

from strom.broker.observability import cluster_state

if TYPE_CHECKING:
    from strom.broker.observability.metrics import BrokerMetrics
    from strom.broker.services import BrokerServices

log = logging.getLogger(__name__)
Check = Callable[[], bool]


class ObservedConnection(Protocol):
    """What the scrape reads of an open client connection: its listener's name."""

    @property
    def listener_name(self) -> str: ...


class ObservedBroker(Protocol):
    """What the readiness checks, the scrape and the admin listener read of a broker (its
    assembly, :class:`strom.broker.assembly.Broker`)."""

    @property
    def metrics(self) -> BrokerMetrics: ...

    @property
    def health(self) -> Health: ...

    @property
    def services(self) -> BrokerServices | None: ...

    @property
    def connections(self) -> Collection[ObservedConnection]: ...

    @property
    def started(self) -> bool: ...

    @property
    def stopping(self) -> bool: ...

    @property
    def logs_loaded(self) -> bool: ...

    def listener_serving(self) -> bool: ...


class Health:
    def __init__(self) -> None:
        self.checks: dict[str, Check] = {}
        self._raising: set[str] = set()

    def add(self, name: str, check: Check) -> None:
        """Add (or replace) the readiness check ``name``."""
        self.checks[name] = check

    def remove(self, name: str) -> None:
        self.checks.pop(name, None)

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        """(ready, JSON body)."""
        results: dict[str, bool] = {}
        for name, check in list(self.checks.items()):
            try:
                results[name] = bool(check())
                self._raising.discard(name)
            except Exception as exc:  # a broken check is a failing one, never a 500
                if name not in self._raising:
                    log.warning("readiness check %s raised %s: %s", name, type(exc).__name__, exc)
                    self._raising.add(name)
                results[name] = False
        failing = [name for name, ok in results.items() if not ok]
        body = {"status": "not ready" if failing else "ready", "failing": failing,
                "checks": results}  # fmt: skip
        return not failing, body


def _coordinators_loaded(services: BrokerServices | None) -> bool:
    if services is None:
        return False
    groups, txns = services.groups.coordinator, services.transactions.coordinator
    if groups is None or groups.loading:
        return False
    return txns is not None and not txns.loading


def broker_health(broker: ObservedBroker) -> Health:
    """The built-in checks of ``broker`` (module doc)."""
    health = Health()
    cluster_state.install(broker.metrics.replication, lambda: broker.services)
    repl = broker.metrics.replication
    health.add("started", lambda: broker.started and not broker.stopping)
    health.add("logs_loaded", lambda: broker.logs_loaded)
    health.add("listener", broker.listener_serving)
    health.add("coordinators_loaded", lambda: _coordinators_loaded(broker.services))
    health.add("controller_known", lambda: repl.controller_known())
    health.add("no_offline_partitions",
               lambda: cluster_state.offline_hosted(broker.services) == 0)  # fmt: skip
    return health
