"""The scrape: every metric family, computed from the broker's state when ``/metrics`` is read.

Names follow what Kafka dashboards query: Kafka's JMX MBeans as the Prometheus JMX exporter's
usual rules name them (``kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec,topic=t`` ->
``kafka_server_brokertopicmetrics_bytesin_total{topic="t"}``), and kafka_exporter's names for
consumer-group lag (``kafka_consumergroup_lag{consumergroup,topic,partition}``). ``docs/
metrics.md`` lists every family with its type, labels and meaning; keep the two in step.

Nothing here runs on the request path: counters come from
:class:`~strom.broker.observability.metrics.BrokerMetrics`, gauges are computed now from the
logs, the topic registry and the coordinators, through the broker's services (a broker that
has not finished starting shows its request counters alone). A scrape runs on the event loop: it sees one
consistent state. Text is written by :mod:`strom.broker.observability.exposition`.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from strom.broker import dispatch
from strom.broker.observability import cluster_state
from strom.broker.observability.exposition import Writer, escape, labels
from strom.broker.observability.metrics import REQUEST_BUCKETS_MS
from strom.protocol.errors import ErrorCode
from strom.storage.flush_stats import BUCKETS_MS as FLUSH_BUCKETS_MS
from strom.storage.flush_stats import FLUSH_STATS

if TYPE_CHECKING:
    from strom.broker.observability.health import ObservedBroker
    from strom.broker.services import BrokerServices

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
    ("fetch_requests", "totalfetchrequests", "Partitions named by Fetch requests"),
    ("failed_fetch_requests", "failedfetchrequests", "Fetch partitions answered with an error"),
)  # fmt: skip
TXN_STATE_NAMES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit",
                   "CompleteAbort", "Dead", "PrepareEpochFence")  # fmt: skip
GROUP_STATES = ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty")
REQUEST_PARTS = (
    ("requestqueuetimems", "queue_s",
     "Time a request waited behind earlier requests of its connection (ms)"),
    ("localtimems", "local_s", "Time a request was handled on the event loop, fsync waits "
     "included (ms)"),
    ("remotetimems", "remote_s", "Time a request waited in the purgatory (long-poll Fetch, "
     "acks=all Produce) (ms)"),
)  # fmt: skip


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


def render(broker: ObservedBroker) -> str:
    """The text of every family of ``docs/metrics.md`` but the process ones."""
    out = Writer()
    services = broker.services
    if services is not None:  # started: it has state
        _topic_metrics(services, out)
    _requests(broker, out)
    if services is not None:
        _sockets(broker, out)
        _logs(services, out)
        _replication(services, out)
        _groups(services, out)
        _share_groups(services, out)
        _transactions(services, out)
        _quotas(services, out)
    return out.text()


def _topic_metrics(services: BrokerServices, out: Writer) -> None:
    metrics = services.metrics
    topics = services.topics
    metrics.retire_topics(lambda name: name in topics)
    totals = metrics.totals()
    per_topic = [(labels(topic=name), counters) for name, counters in sorted(metrics.topics.items())]
    for slot, name, doc in TOPIC_COUNTERS:
        sample = out.family(f"kafka_server_brokertopicmetrics_{name}", "counter",
                            f"{doc}; without a topic label: all topics")  # fmt: skip
        # the broker-wide series has no topic label, as the JMX exporter writes Kafka's
        out.sample(sample, getattr(totals, slot))
        for label_text, counters in per_topic:
            out.sample(sample, getattr(counters, slot), label_text)


def _requests(broker: ObservedBroker, out: Writer) -> None:
    requests = broker.metrics.requests
    named = [(spec.api_key, request_name(spec.api_key)) for spec in dispatch.supported_apis()]
    if any(key == 1 for key, _ in named):  # Kafka counts a Fetch also as FetchConsumer (or
        named.append((1, "FetchConsumer"))  # FetchFollower): all consumers' until replication
    used = [(key, name, f'request="{name}"') for key, name in named if requests[key].count]
    out.series("kafka_network_requestmetrics_requests", "counter", "Requests received, by API",
               ((f'{{request="{name}"}}', requests[key].count) for key, name in named))
    sample = out.family("kafka_network_requestmetrics_errors", "counter",
                        "Error codes other than NONE in responses (per partition for Produce "
                        "and Fetch), by API and error")  # fmt: skip
    for key, _name, pairs in used:
        for code, count in sorted(requests[key].errors.items()):
            out.sample(sample, count, f'{{{pairs},error="{error_name(code)}"}}')
    name = "kafka_network_requestmetrics_totaltimems"
    out.family(name, "histogram", "Time from receiving a request to its response being ready (ms)")
    for key, _name, pairs in used:
        stats = requests[key]
        out.histogram(name, pairs, REQUEST_BUCKETS_MS, stats.buckets, stats.total_s * 1000.0)
    for metric, slot, doc in REQUEST_PARTS:
        name = f"kafka_network_requestmetrics_{metric}"
        out.family(name, "summary", doc)
        for key, _name, pairs in used:
            stats = requests[key]
            out.summary(name, pairs, stats.count, getattr(stats, slot) * 1000.0)


def _sockets(broker: ObservedBroker, out: Writer) -> None:
    """Kafka's socket-server metrics, one series per listener (its name, as Kafka labels them)."""
    metrics = broker.metrics
    open_by_listener: dict[str, int] = dict.fromkeys(metrics.connections_created, 0)
    for conn in broker.connections:
        name = conn.listener_name
        open_by_listener[name] = open_by_listener.get(name, 0) + 1
    for metric, doc, counts in (
        ("connection_count", "Open client connections", open_by_listener),
        ("connection_creation", "Client connections accepted", metrics.connections_created),
        ("connection_close", "Client connections closed", metrics.connections_closed),
        ("failed_authentication",
         "Failed authentications (TLS handshakes refused, SASL failures), by listener",
         metrics.failed_authentication),
    ):  # fmt: skip
        kind = "gauge" if metric == "connection_count" else "counter"
        out.series(f"kafka_server_socket_server_metrics_{metric}", kind, doc,
                   ((labels(listener=name), n) for name, n in sorted(counts.items())))  # fmt: skip


def _logs(services: BrokerServices, out: Writer) -> None:
    logs = [(labels(topic=t, partition=p), log) for (t, p), log in sorted(services.logs.logs())]
    out.series("kafka_log_log_size", "gauge", "Bytes of the partition's segment files (.log)",
               ((k, sum(s.size for s in log.segments)) for k, log in logs))
    out.series("kafka_log_log_numlogsegments", "gauge", "Segments of the partition",
               ((k, len(log.segments)) for k, log in logs))
    out.series("kafka_log_log_logendoffset", "gauge", "Log end offset",
               ((k, log.log_end_offset) for k, log in logs))
    out.series("kafka_log_log_logstartoffset", "gauge", "Log start offset",
               ((k, log.log_start_offset) for k, log in logs))
    # kafka_exporter's names for the same offsets (its dashboards read these)
    out.series("kafka_topic_partition_current_offset", "gauge", "High watermark of a partition",
               ((k, log.high_watermark) for k, log in logs))
    out.series("kafka_topic_partition_oldest_offset", "gauge", "Log start offset of a partition",
               ((k, log.log_start_offset) for k, log in logs))
    _count, total_ms, buckets = FLUSH_STATS.snapshot()
    name = "kafka_log_logflushstats_logflushrateandtimems"
    out.family(name, "histogram", "Time to fsync a segment and its indexes (ms)")
    out.histogram(name, "", FLUSH_BUCKETS_MS, buckets, total_ms)


def _replication(services: BrokerServices, out: Writer) -> None:
    repl = services.metrics.replication
    node = services.node.node_id
    topics = list(services.topics)
    partitions = sum(len(t.replicas) for t in topics)
    hosted = sum(1 for t in topics for r in t.replicas.values() if node in r)
    for name, doc, value in (
        ("kafka_server_replicamanager_partitioncount", "Partitions hosted here", hosted),
        ("kafka_server_replicamanager_leadercount", "Partitions led here",
         cluster_state.leader_count(services)),
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
        ("kafka_controller_kafkacontroller_globalpartitioncount", "Partitions in the cluster",
         partitions),
        ("kafka_brokers", "Live brokers in the cluster, as this broker knows them "
         "(kafka_exporter)", cluster_state.live_brokers(services)),
    ):  # fmt: skip
        out.single(name, "gauge", doc, value)
    for name, doc, value in (
        ("kafka_server_replicamanager_isrshrinks", "ISR shrinks of partitions led here",
         repl.isr_shrinks),
        ("kafka_server_replicamanager_isrexpands", "ISR expansions of partitions led here",
         repl.isr_expands),
        ("kafka_controller_controllerstats_uncleanleaderelections",
         "Leader elections of a replica outside the ISR", repl.unclean_leader_elections),
    ):  # fmt: skip
        out.single(name, "counter", doc, value)
    name = "kafka_controller_controllerstats_leaderelectionrateandtimems"
    out.family(name, "summary", "Leader elections by the controller and their time (ms)")
    out.summary(name, "", repl.leader_elections, repl.leader_election_ms)


def _groups(services: BrokerServices, out: Writer) -> None:
    coordinator = services.groups.coordinator
    if coordinator is None:
        return
    groups: dict[str, Any] = dict(coordinator.groups)
    by_state = Counter(g.state.value for g in groups.values() if g.consumer is None)
    prefix = "kafka_coordinator_group_groupmetadatamanager_"
    out.single(prefix + "numgroups", "gauge", "Consumer groups", len(groups))
    for state in GROUP_STATES:
        out.single(f"{prefix}numgroups{state.lower()}", "gauge",
                   f"Consumer groups in state {state}", by_state.get(state, 0))
    out.single(prefix + "numoffsets", "gauge", "Committed offsets held",
               sum(len(g.offsets) for g in groups.values()))
    # Kafka 4's group coordinator metrics: groups by protocol, KIP-848 groups by state
    by_type = Counter(g.group_type for g in groups.values())
    out.series("kafka_server_group_coordinator_metrics_group_count", "gauge",
               "Groups by protocol (classic, consumer)",
               ((f'{{protocol="{t}"}}', by_type.get(t, 0)) for t in ("classic", "consumer")))  # fmt: skip
    consumer_states = Counter(g.state_name for g in groups.values() if g.consumer is not None)
    out.series("kafka_server_group_coordinator_metrics_consumer_group_count", "gauge",
               "KIP-848 consumer groups by state",
               ((f'{{state="{st.lower()}"}}', consumer_states.get(st, 0))
                for st in ("Empty", "Assigning", "Reconciling", "Stable", "Dead")))  # fmt: skip
    out.single("kafka_server_group_coordinator_metrics_group_rebalance", "counter",
               "Rebalances begun (groups entering PreparingRebalance)", coordinator.rebalances)
    out.single("kafka_server_group_coordinator_metrics_group_completed_rebalance", "counter",
               "Generations formed (groups entering CompletingRebalance)",
               coordinator.completed_rebalances)
    _lag(services, groups, out)


def _lag(services: BrokerServices, groups: dict[str, Any], out: Writer) -> None:
    """kafka_exporter's families: lag = the partition's high watermark minus the group's
    committed offset (never negative); partitions not hosted here are left out."""
    logs = services.logs
    rows: list[tuple[str, int, int]] = []  # (label text, committed, lag)
    sums: list[tuple[str, int]] = []
    members: list[tuple[str, int]] = []
    for group_id, group in sorted(groups.items()):
        gid = escape(group_id)
        count = len(group.members) if group.consumer is None else len(group.consumer.members)
        members.append((f'{{consumergroup="{gid}"}}', count))
        per_topic: dict[str, int] = {}
        for (topic, partition), entry in sorted(group.offsets.items()):
            log = logs.get(topic, partition)
            if log is None or entry.offset < 0:
                continue
            behind = max(log.high_watermark - entry.offset, 0)
            rows.append((f'{{consumergroup="{gid}",topic="{escape(topic)}",'
                         f'partition="{partition}"}}', entry.offset, behind))  # fmt: skip
            per_topic[topic] = per_topic.get(topic, 0) + behind
        sums.extend((f'{{consumergroup="{gid}",topic="{escape(t)}"}}', total)
                    for t, total in sorted(per_topic.items()))  # fmt: skip
    out.series("kafka_consumergroup_current_offset", "gauge",
               "Committed offset of a group on a partition", ((k, c) for k, c, _ in rows))
    out.series("kafka_consumergroup_lag", "gauge",
               "High watermark minus the group's committed offset", ((k, lag) for k, _, lag in rows))
    out.series("kafka_consumergroup_lag_sum", "gauge", "Lag of a group on a topic", sums)
    out.series("kafka_consumergroup_members", "gauge", "Members of a group", members)


# (Stats slot, metric name after kafka_server_share_group_metrics_, help)
SHARE_COUNTERS = (
    ("acquired", "records_acquired", "Records handed out by ShareFetch (redeliveries included)"),
    ("redelivered", "records_redelivered", "Records handed out again (delivery count above 1)"),
    ("acknowledged", "records_accepted", "Records acknowledged ACCEPT"),
    ("released", "records_released", "Records acknowledged RELEASE"),
    ("rejected", "records_rejected", "Records acknowledged REJECT"),
    ("archived", "records_archived",
     "Records archived: rejected, at the delivery limit, gaps, aborted or control records"),
    ("lock_expiries", "lock_expiries", "Records whose acquisition lock ran out"),
    ("delivery_limit", "delivery_limit_archived",
     "Records archived on reaching the delivery limit"),
)  # fmt: skip


def _share_groups(services: BrokerServices, out: Writer) -> None:
    """Share groups (KIP-932): the groups this broker coordinates, the share-partitions it
    leads (in-flight window, acquired records) and counters of what they did."""
    shares = services.shares
    groups = dict(shares.groups.groups)
    by_state = Counter(g.state for g in groups.values())
    out.series("kafka_server_group_coordinator_metrics_share_group_count", "gauge",
               "Share groups this broker coordinates, by state",
               ((f'{{state="{state}"}}', by_state.get(state, 0)) for state in ("Empty", "Stable")))  # fmt: skip
    out.series("kafka_sharegroup_members", "gauge", "Members of a share group (its size)",
               ((labels(sharegroup=gid), len(g.members)) for gid, g in sorted(groups.items())))  # fmt: skip
    manager = shares.manager
    parts = sorted(manager.partitions.values(), key=lambda sp: (sp.group, sp.topic, sp.index))
    rows = [(labels(sharegroup=sp.group, topic=sp.topic, partition=sp.index), sp) for sp in parts]
    out.series("kafka_sharepartition_in_flight_records", "gauge",
               "Records of the in-flight window (start offset to end offset) of a share-partition led here",
               ((k, sp.in_flight()) for k, sp in rows))  # fmt: skip
    out.series("kafka_sharepartition_acquired_records", "gauge",
               "Records of a share-partition acquired by consumers now",
               ((k, sp.acquired_count()) for k, sp in rows))  # fmt: skip
    out.series("kafka_sharepartition_start_offset", "gauge",
               "A share-partition's start offset (SPSO)", ((k, sp.spso) for k, sp in rows))
    for slot, name, doc in SHARE_COUNTERS:
        total = getattr(manager.retired, slot) + sum(getattr(sp.stats, slot) for sp in parts)
        out.single(f"kafka_server_share_group_metrics_{name}", "counter",
                   f"{doc} (share-partitions led here)", total)  # fmt: skip
    out.single("kafka_server_share_group_metrics_share_sessions", "gauge",
               "Share sessions open on this broker", len(manager.sessions.sessions))


def _transactions(services: BrokerServices, out: Writer) -> None:
    coordinator = services.transactions.coordinator
    if coordinator is None:
        return
    by_state = Counter(int(v.state) for v in coordinator.txns.values())
    out.series("kafka_server_transaction_coordinator_metrics_transactions", "gauge",
               "Transactional ids by transaction state",
               ((f'{{state="{name}"}}', by_state.get(i, 0)) for i, name in enumerate(TXN_STATE_NAMES)))


# (manager attribute of ClientQuotas, Kafka's quota type name, the measured value's metric, help)
QUOTA_TYPES = (
    ("produce", "produce", "byte_rate", "Produce request bytes per second"),
    ("fetch", "fetch", "byte_rate", "Fetch response record bytes per second"),
    ("request", "request", "request_time", "Request handling time, percent of a second"),
    ("mutation", "controller_mutation", "rate", "Partitions created or deleted per second"),
)  # fmt: skip


def _quotas(services: BrokerServices, out: Writer) -> None:
    """Client quotas (Kafka's ``kafka.server:type=Produce|Fetch|Request,user=,client-id=``):
    one series per measurement in use (an entity with a quota and a client that sent under
    it), labelled as Kafka tags it (``user`` sanitized, empty when the quota is per client id;
    ``client_id`` empty when it is per user)."""
    quotas = services.quotas.quotas
    now_ms = int(services.clock.monotonic() * 1000)
    for attr, kind, measured, doc in QUOTA_TYPES:
        sensors = sorted(getattr(quotas, attr).sensors.items())
        rows = [(labels(user=user, client_id=client), sensor) for (user, client), sensor in sensors]
        out.series(f"kafka_server_{kind}_{measured}", "gauge", f"{doc}, over the quota window",
                   ((k, s.rate.measure(now_ms)) for k, s in rows))  # fmt: skip
        out.series(f"kafka_server_{kind}_quota", "gauge", "The quota bound in force",
                   ((k, s.bound) for k, s in rows))  # fmt: skip
        out.series(f"kafka_server_{kind}_throttle_time_ms", "counter",
                   "Throttle times given to responses, summed (ms)",
                   ((k, s.throttle_ms_total) for k, s in rows))  # fmt: skip
        out.series(f"kafka_server_{kind}_throttled_responses", "counter",
                   "Responses that carried a throttle time", ((k, s.throttled) for k, s in rows))
