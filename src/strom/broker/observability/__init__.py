"""Observability of a broker: hot-path counters, the Prometheus collector, health checks and
the admin listener that serves them (``/metrics``, ``/health/live``, ``/health/ready``).

The broker imports this package; storage and protocol never do (storage keeps its own plain
counters, :mod:`strom.storage.flush_stats`, which the collector reads). Every metric is
documented in ``docs/metrics.md``.
"""

from strom.broker.observability.health import Health, broker_health
from strom.broker.observability.metrics import BrokerMetrics, ReplicationMetrics, TopicCounters

__all__ = ["BrokerMetrics", "Health", "ReplicationMetrics", "TopicCounters", "broker_health"]
