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

Everything is duck-typed through ``broker.extensions`` and ``broker.replicas`` (absent before
start: every function then answers its idle value), so this module imports no broker service.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from strom.broker.broker import Broker

NO_LEADER = -1


def _controller(broker: Broker) -> Any:
    """The cluster controller of this broker (``strom.controller``), or None on a single node."""
    return broker.extensions.get("controller")


def _local(broker: Broker) -> bool:
    """Whether this broker leads itself (a single node: ``local_leadership`` is running)."""
    replicas = getattr(broker, "replicas", None)
    return replicas is not None and replicas.led_locally


def _led(broker: Broker) -> list[Any]:
    replicas = getattr(broker, "replicas", None)
    if replicas is None:
        return []
    return [p for p in replicas.partitions.values() if p.is_leader]


def under_replicated(broker: Broker) -> int:
    return sum(1 for p in _led(broker) if len(p.isr) < len(p.replicas))


def under_min_isr(broker: Broker) -> int:
    return sum(1 for p in _led(broker) if len(p.isr) < p.log.config.min_insync_replicas)


def leader_count(broker: Broker) -> int:
    return len(_led(broker))


def offline_partitions(broker: Broker) -> int:
    controller = _controller(broker)
    ctx = getattr(controller, "ctx", None)
    if ctx is None:  # not the active controller (or a single node: every partition is led)
        return 0
    return len(ctx.offline())


def active_controller(broker: Broker) -> int:
    controller = _controller(broker)
    if controller is None:
        return 1 if _local(broker) else 0
    return 1 if controller.active else 0


def controller_known(broker: Broker) -> bool:
    controller = _controller(broker)
    if controller is None:
        return _local(broker)
    state = getattr(getattr(broker, "store", None), "state", None)
    if state is not None and getattr(state, "value", state) != "connected":
        return False  # suspended or lost: nothing known of the office can be trusted
    return controller.active or controller.active_id is not None


def live_brokers(broker: Broker) -> int:
    replicas = getattr(broker, "replicas", None)
    if replicas is None:
        return 0
    return max(len(replicas.cache.brokers), 1 if _local(broker) else 0)


def offline_hosted(broker: Broker) -> int:
    replicas = getattr(broker, "replicas", None)
    if replicas is None:
        return 0
    node = broker.node_id
    count = 0
    for key, info in replicas.cache.partitions.items():
        if info.leader == node:
            part = replicas.partitions.get(key)
            if part is None or not part.is_leader:
                count += 1
    return count


def install(broker: Broker) -> None:
    """Point ``broker.metrics.replication``'s gauges at ``broker``'s state (module doc)."""
    repl = broker.metrics.replication
    repl.under_replicated = lambda: under_replicated(broker)
    repl.under_min_isr = lambda: under_min_isr(broker)
    repl.offline_partitions = lambda: offline_partitions(broker)
    repl.active_controller = lambda: active_controller(broker)
    repl.controller_known = lambda: controller_known(broker)
