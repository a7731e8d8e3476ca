"""The replication and controller gauges, read from the broker's own state when scraped.

:func:`install` replaces the single-node defaults of
:class:`~strom.broker.observability.metrics.ReplicationMetrics` by functions that look at what
this broker knows right now, the same way on a single node (it leads every partition it
hosts, :mod:`strom.replication.local_leadership`) and in a cluster (a controller's LeaderAndIsr
and UpdateMetadata decide):

- ``under_replicated`` / ``under_min_isr``: partitions led here whose committed ISR is smaller
  than their replica set / than their ``min.insync.replicas`` (Kafka's
  ``UnderReplicatedPartitions`` and ``UnderMinIsrPartitionCount``);
- ``offline_partitions``: on the active controller, partitions without a live leader; 0 on
  every other broker (Kafka's ``OfflinePartitionsCount`` is the controller's);
- ``active_controller``: 1 on the active controller (a single node is its own), else 0;
- ``controller_known``: a single node always; a cluster member while its metadata-store
  session is connected and a controller holds the office;
- ``offline_hosted`` (readiness only): partitions the metadata cache says this broker leads
  but it does not lead yet (LeaderAndIsr not applied): "offline partitions led here". A hosted
  partition with no leader at all does not count: this broker cannot serve it either way, and
  a readiness probe failing on every replica of it would take the healthy brokers out of
  service too (the controller's ``offline_partitions`` gauge reports it).

Each function reads a broker's :class:`~strom.broker.services.BrokerServices` (None before the
broker finished starting: every function then answers its idle value).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from strom.broker.observability.metrics import ReplicationMetrics
    from strom.broker.services import BrokerServices
    from strom.controller import Controller
    from strom.replication.partition import Partition

NO_LEADER = -1


def _controller(services: BrokerServices | None) -> Controller | None:
    """The cluster controller of this broker, or None (a single node, or not started)."""
    return services.controller.service.controller if services is not None else None


def _local(services: BrokerServices | None) -> bool:
    """Whether this broker leads itself (a single node: local leadership is running)."""
    return services is not None and services.replicas.led_locally


def _led(services: BrokerServices | None) -> list[Partition]:
    if services is None:
        return []
    return [p for p in services.replicas.partitions.values() if p.is_leader]


def under_replicated(services: BrokerServices | None) -> int:
    return sum(1 for p in _led(services) if len(p.isr) < len(p.replicas))


def under_min_isr(services: BrokerServices | None) -> int:
    return sum(1 for p in _led(services) if len(p.isr) < p.log.config.min_insync_replicas)


def leader_count(services: BrokerServices | None) -> int:
    return len(_led(services))


def offline_partitions(services: BrokerServices | None) -> int:
    controller = _controller(services)
    ctx = controller.ctx if controller is not None else None
    if ctx is None:  # not the active controller (or a single node: every partition is led)
        return 0
    return len(ctx.offline())


def active_controller(services: BrokerServices | None) -> int:
    controller = _controller(services)
    if controller is None:
        return 1 if _local(services) else 0
    return 1 if controller.active else 0


def controller_known(services: BrokerServices | None) -> bool:
    controller = _controller(services)
    if controller is None:
        return _local(services)
    state = getattr(controller.store, "state", None)  # a ZooKeeper session's (None: embedded)
    if state is not None and getattr(state, "value", state) != "connected":
        return False  # suspended or lost: nothing known of the office can be trusted
    return controller.active or controller.active_id is not None


def live_brokers(services: BrokerServices | None) -> int:
    if services is None:
        return 0
    return max(len(services.replicas.cache.brokers), 1 if _local(services) else 0)


def offline_hosted(services: BrokerServices | None) -> int:
    if services is None:
        return 0
    replicas = services.replicas
    node = services.node.node_id
    count = 0
    for key, info in replicas.cache.partitions.items():
        if info.leader == node:
            part = replicas.partitions.get(key)
            if part is None or not part.is_leader:
                count += 1
    return count


def install(repl: ReplicationMetrics, current: Callable[[], BrokerServices | None]) -> None:
    """Point ``repl``'s gauges at the broker whose services ``current()`` returns (module
    doc)."""
    repl.under_replicated = lambda: under_replicated(current())
    repl.under_min_isr = lambda: under_min_isr(current())
    repl.offline_partitions = lambda: offline_partitions(current())
    repl.active_controller = lambda: active_controller(current())
    repl.controller_known = lambda: controller_known(current())
