"""The Prometheus collector: every metric family, built from the broker's state when scraped.

Names follow what Kafka dashboards query: Kafka's JMX MBeans as the Prometheus JMX exporter's
usual rules name them (``kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec,topic=t`` ->
``kafka_server_brokertopicmetrics_bytesin_total{topic="t"}``), and kafka_exporter's names for
consumer-group lag (``kafka_consumergroup_lag{consumergroup,topic,partition}``). ``docs/
metrics.md`` lists every family with its type, labels and meaning; keep the two in step.

Nothing here runs on the request path: counters come from
:class:`~strom.broker.observability.metrics.BrokerMetrics`, gauges are computed now from the
logs, the topic registry and the coordinators (found through ``broker.extensions``, duck-typed,
so this module imports none of them). A scrape runs on the event loop: it sees one
consistent state and costs about a microsecond per partition.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from strom.broker.observability.metrics import REQUEST_BUCKETS_MS, TopicCounters
from strom.protocol.errors import ErrorCode
from strom.storage.flush_stats import BUCKETS_MS as FLUSH_BUCKETS_MS
from strom.storage.flush_stats import FLUSH_STATS

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from strom.broker.broker import Broker

# (slot of TopicCounters, metric name after kafka_server_brokertopicmetrics_, help)
TOPIC_COUNTERS = (
    ("messages_in", "messagesin", "Records appended by Produce requests"),
    ("bytes_in", "bytesin", "Record batch bytes appended by Produce requests (Kafka's BytesIn)"),
    ("value_bytes_in", "valuebytesin",
     "Value bytes of the records appended by Produce requests (strom's addition)"),
    ("bytes_out", "bytesout", "Record batch bytes sent in Fetch responses"),
    ("bytes_rejected", "bytesrejected", "Record batch bytes of Produce appends refused"),
    ("produce_requests", "totalproducerequests", "Partitions written by Produce requests"),
    ("failed_produce_requests", "failedproducerequests", "Produce partitions answered with an error"),
    ("fetch_requests", "totalfetchrequests", "Partitions read by Fetch requests"),
    ("failed_fetch_requests", "failedfetchrequests", "Fetch partitions answered with an error"),
)  # fmt: skip
TXN_STATE_NAMES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit",
                   "CompleteAbort", "Dead", "PrepareEpochFence")  # fmt: skip
GROUP_STATES = ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty")


def request_name(api_key: int) -> str:
    """Kafka's name of an API (``ApiKeys.name``): ``list_offsets`` -> ``ListOffsets``."""
    from kio.schema.index import api_key_map

    snake = api_key_map.get(api_key)
    if snake is None:
        return f"ApiKey{api_key}"
    return "".join(part.capitalize() for part in snake.split("_"))


def error_name(code: int) -> str:
    """Kafka's constant name of an error code (``UNKNOWN_TOPIC_OR_PARTITION``)."""
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return str(code)


def _cumulative(counts: Iterable[int], bounds: Iterable[float]) -> list[tuple[str, float]]:
    out: list[tuple[str, float]] = []
    running = 0
    labels = [_le(b) for b in bounds] + ["+Inf"]
    for label, count in zip(labels, counts, strict=True):
        running += count
        out.append((label, running))
    return out


def _le(bound: float) -> str:
    return str(float(bound))


class BrokerCollector(Collector):
    """Yields every family of ``docs/metrics.md`` for one broker."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def collect(self) -> Iterator[Metric]:
        broker = self.broker
        if not hasattr(broker, "logs"):  # not started yet: only what needs no state
            yield from self._requests()
            return
        yield from self._topic_metrics()
        yield from self._requests()
        yield from self._sockets()
        yield from self._logs()
        yield from self._replication()
        yield from self._groups()
        yield from self._transactions()

    # BrokerTopicMetrics ------------------------------------------------------------------------
    def _topic_metrics(self) -> Iterator[Metric]:
        metrics = self.broker.metrics
        topics = self.broker.topics
        metrics.retire_topics(lambda name: name in topics)
        totals = metrics.totals()
        per_topic = sorted(metrics.topics.items())
        for slot, name, doc in TOPIC_COUNTERS:
            family = CounterMetricFamily(
                f"kafka_server_brokertopicmetrics_{name}",
                f"{doc}; without a topic label: all topics", labels=["topic"],
            )  # fmt: skip
            # the broker-wide series has no topic label, as the JMX exporter writes Kafka's
            family.samples.append(Sample(family.name + "_total", {}, getattr(totals, slot)))
            for topic, counters in per_topic:
                family.add_metric([topic], getattr(counters, slot))
            yield family

    # RequestMetrics ------------------------------------------------------------------------------
    def _requests(self) -> Iterator[Metric]:
        from strom.broker import dispatch

        metrics = self.broker.metrics
        served = [(spec.api_key, request_name(spec.api_key)) for spec in dispatch.supported_apis()]
        # Kafka counts a Fetch under "Fetch" and under "FetchConsumer" or "FetchFollower"; every
        # Fetch is a consumer's until replication lands
        named = list(served) + [(1, "FetchConsumer")] if any(k == 1 for k, _ in served) else served
        requests = CounterMetricFamily("kafka_network_requestmetrics_requests",
                                       "Requests received, by API", labels=["request"])
        errors = CounterMetricFamily(
            "kafka_network_requestmetrics_errors",
            "Error codes other than NONE in responses (per partition where the response has "
            "partitions), by API and error", labels=["request", "error"],
        )  # fmt: skip
        total = HistogramMetricFamily(
            "kafka_network_requestmetrics_totaltimems",
            "Time from receiving a request to its response being ready (ms)", labels=["request"],
        )  # fmt: skip
        parts = {
            "requestqueuetimems": ("queue_s", "Time a request waited behind earlier requests "
                                   "of its connection (ms)"),
            "localtimems": ("local_s", "Time a request was handled on the event loop, fsync "
                            "waits included (ms)"),
            "remotetimems": ("remote_s", "Time a request waited in the purgatory (long-poll "
                             "Fetch) (ms)"),
        }  # fmt: skip
        summaries = {
            name: SummaryMetricFamily(f"kafka_network_requestmetrics_{name}", doc,
                                      labels=["request"])
            for name, (_slot, doc) in parts.items()
        }  # fmt: skip
        for api_key, name in named:
            stats = metrics.requests[api_key]
            requests.add_metric([name], stats.count)
            if not stats.count:  # times of APIs never called: left out (a smaller scrape)
                continue
            for code, count in sorted(stats.errors.items()):
                errors.add_metric([name, error_name(code)], count)
            total.add_metric([name], _cumulative(stats.buckets, REQUEST_BUCKETS_MS),
                             stats.total_s * 1000.0)  # fmt: skip
            for metric, (slot, _doc) in parts.items():
                summaries[metric].add_metric([name], stats.count, getattr(stats, slot) * 1000.0)
        yield requests
        yield errors
        yield total
        yield from summaries.values()

    # SocketServer ----------------------------------------------------------------------------
    def _sockets(self) -> Iterator[Metric]:
        broker = self.broker
        metrics = broker.metrics
        listener = ["PLAINTEXT"]
        gauge = GaugeMetricFamily("kafka_server_socket_server_metrics_connection_count",
                                  "Open client connections", labels=["listener"])
        gauge.add_metric(listener, len(broker.connections))
        yield gauge
        for name, value, doc in (
            ("connection_creation", metrics.connections_created, "Client connections accepted"),
            ("connection_close", metrics.connections_closed, "Client connections closed"),
        ):
            family = CounterMetricFamily(f"kafka_server_socket_server_metrics_{name}", doc,
                                         labels=["listener"])  # fmt: skip
            family.add_metric(listener, value)
            yield family

    # Log -------------------------------------------------------------------------------------
    def _logs(self) -> Iterator[Metric]:
        labels = ["topic", "partition"]
        size = GaugeMetricFamily("kafka_log_log_size", "Bytes of the partition's segment files "
                                 "(.log)", labels=labels)  # fmt: skip
        segments = GaugeMetricFamily("kafka_log_log_numlogsegments", "Segments of the partition",
                                     labels=labels)  # fmt: skip
        end = GaugeMetricFamily("kafka_log_log_logendoffset", "Log end offset", labels=labels)
        start = GaugeMetricFamily("kafka_log_log_logstartoffset", "Log start offset",
                                  labels=labels)  # fmt: skip
        for (topic, partition), log in sorted(self.broker.logs.logs()):
            key = [topic, str(partition)]
            segs = log.segments
            size.add_metric(key, sum(s.size for s in segs))
            segments.add_metric(key, len(segs))
            end.add_metric(key, log.log_end_offset)
            start.add_metric(key, log.log_start_offset)
        yield from (size, segments, end, start)
        count, total_ms, buckets = FLUSH_STATS.snapshot()
        flush = HistogramMetricFamily(
            "kafka_log_logflushstats_logflushrateandtimems",
            "Time to fsync a segment and its indexes (ms)",
            buckets=_cumulative(buckets, FLUSH_BUCKETS_MS), sum_value=total_ms,
        )  # fmt: skip
        del count
        yield flush

    # ReplicaManager and controller ---------------------------------------------------------------
    def _replication(self) -> Iterator[Metric]:
        broker = self.broker
        repl = broker.metrics.replication
        node = broker.node_id
        topics = list(broker.topics)
        partitions = sum(len(t.replicas) for t in topics)
        hosted = sum(1 for t in topics for r in t.replicas.values() if node in r)
        gauges = (
            ("kafka_server_replicamanager_partitioncount", "Partitions hosted here", hosted),
            ("kafka_server_replicamanager_leadercount", "Partitions led here", hosted),
            ("kafka_server_replicamanager_underreplicatedpartitions",
             "Partitions led here whose ISR is smaller than their replica set",
             repl.under_replicated()),
            ("kafka_server_replicamanager_underminisrpartitioncount",
             "Partitions led here whose ISR is smaller than min.insync.replicas",
             repl.under_min_isr()),
            ("kafka_server_replicamanager_offlinereplicacount", "Replicas hosted here offline",
             repl.offline_replicas()),
            ("kafka_controller_kafkacontroller_activecontrollercount",
             "1 on the active controller, 0 elsewhere", repl.active_controller()),
            ("kafka_controller_kafkacontroller_offlinepartitionscount",
             "Partitions without a leader", repl.offline_partitions()),
            ("kafka_controller_kafkacontroller_globaltopiccount", "Topics in the cluster",
             len(topics)),
            ("kafka_controller_kafkacontroller_globalpartitioncount",
             "Partitions in the cluster", partitions),
        )  # fmt: skip
        for name, doc, value in gauges:
            yield GaugeMetricFamily(name, doc, value=value)
        counters = (
            ("kafka_server_replicamanager_isrshrinks", "ISR shrinks of partitions led here",
             repl.isr_shrinks),
            ("kafka_server_replicamanager_isrexpands", "ISR expansions of partitions led here",
             repl.isr_expands),
            ("kafka_controller_controllerstats_uncleanleaderelections",
             "Leader elections of a replica outside the ISR", repl.unclean_leader_elections),
        )  # fmt: skip
        for name, doc, value in counters:
            yield CounterMetricFamily(name, doc, value=value)
        yield SummaryMetricFamily(
            "kafka_controller_controllerstats_leaderelectionrateandtimems",
            "Leader elections by the controller and the time they took (ms)",
            count_value=repl.leader_elections, sum_value=repl.leader_election_ms,
        )  # fmt: skip
        # kafka_exporter's partition offsets and broker count
        newest = GaugeMetricFamily("kafka_topic_partition_current_offset",
                                   "High watermark of a partition", labels=["topic", "partition"])
        oldest = GaugeMetricFamily("kafka_topic_partition_oldest_offset",
                                   "Log start offset of a partition", labels=["topic", "partition"])
        for (topic, partition), log in sorted(broker.logs.logs()):
            newest.add_metric([topic, str(partition)], log.high_watermark)
            oldest.add_metric([topic, str(partition)], log.log_start_offset)
        yield newest
        yield oldest
        yield GaugeMetricFamily("kafka_brokers", "Brokers in the cluster", value=1)

    # group coordinator ---------------------------------------------------------------------------
    def _groups(self) -> Iterator[Metric]:
        service = self.broker.extensions.get("group_coordinator")
        coordinator = getattr(service, "coordinator", None)
        if coordinator is None:
            return
        groups: dict[str, Any] = dict(coordinator.groups)
        by_state = Counter(g.state.value for g in groups.values())
        yield GaugeMetricFamily("kafka_coordinator_group_groupmetadatamanager_numgroups",
                                "Consumer groups", value=len(groups))  # fmt: skip
        for state in GROUP_STATES:
            yield GaugeMetricFamily(
                f"kafka_coordinator_group_groupmetadatamanager_numgroups{state.lower()}",
                f"Consumer groups in state {state}", value=by_state.get(state, 0),
            )  # fmt: skip
        yield GaugeMetricFamily("kafka_coordinator_group_groupmetadatamanager_numoffsets",
                                "Committed offsets held", value=sum(len(g.offsets) for g in
                                                                    groups.values()))  # fmt: skip
        yield CounterMetricFamily("kafka_server_group_coordinator_metrics_group_rebalance",
                                  "Rebalances begun (groups entering PreparingRebalance)",
                                  value=coordinator.rebalances)  # fmt: skip
        yield CounterMetricFamily(
            "kafka_server_group_coordinator_metrics_group_completed_rebalance",
            "Generations formed (groups entering CompletingRebalance)",
            value=coordinator.completed_rebalances,
        )  # fmt: skip
        yield from self._lag(groups)

    def _lag(self, groups: dict[str, Any]) -> Iterator[Metric]:
        """kafka_exporter's families: lag = the partition's high watermark minus the group's
        committed offset (never negative); partitions not hosted here are left out."""
        labels = ["consumergroup", "topic", "partition"]
        current = GaugeMetricFamily("kafka_consumergroup_current_offset",
                                    "Committed offset of a group on a partition", labels=labels)
        lag = GaugeMetricFamily("kafka_consumergroup_lag",
                                "High watermark minus the group's committed offset",
                                labels=labels)  # fmt: skip
        lag_sum = GaugeMetricFamily("kafka_consumergroup_lag_sum", "Lag of a group on a topic",
                                    labels=["consumergroup", "topic"])  # fmt: skip
        members = GaugeMetricFamily("kafka_consumergroup_members", "Members of a group",
                                    labels=["consumergroup"])  # fmt: skip
        logs = self.broker.logs
        for group_id, group in sorted(groups.items()):
            members.add_metric([group_id], len(group.members))
            sums: dict[str, int] = {}
            for (topic, partition), entry in sorted(group.offsets.items()):
                log = logs.get(topic, partition)
                if log is None or entry.offset < 0:
                    continue
                behind = max(log.high_watermark - entry.offset, 0)
                key = [group_id, topic, str(partition)]
                current.add_metric(key, entry.offset)
                lag.add_metric(key, behind)
                sums[topic] = sums.get(topic, 0) + behind
            for topic, total in sorted(sums.items()):
                lag_sum.add_metric([group_id, topic], total)
        yield from (current, lag, lag_sum, members)

    # transaction coordinator ---------------------------------------------------------------------
    def _transactions(self) -> Iterator[Metric]:
        service = self.broker.extensions.get("txn_coordinator")
        coordinator = getattr(service, "coordinator", None)
        if coordinator is None:
            return
        by_state = Counter(int(v.state) for v in coordinator.txns.values())
        family = GaugeMetricFamily("kafka_server_transaction_coordinator_metrics_transactions",
                                   "Transactional ids by transaction state", labels=["state"])
        for state_id, name in enumerate(TXN_STATE_NAMES):
            family.add_metric([name], by_state.get(state_id, 0))
        yield family


def topic_counter_names() -> list[str]:
    """The names of the BrokerTopicMetrics counter families (for docs and tests)."""
    return [f"kafka_server_brokertopicmetrics_{name}" for _slot, name, _doc in TOPIC_COUNTERS]


__all__ = ["BrokerCollector", "TopicCounters", "error_name", "request_name", "topic_counter_names"]
