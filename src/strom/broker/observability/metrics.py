"""The broker's hot-path counters: plain Python objects, read by the collector when scraped.

Cheap enough to leave on: the request path only adds to integer and float attributes of
objects it already holds (no allocation, no lock, no Prometheus call; one event loop writes
them). Everything that can be derived from the broker's state (log sizes, group lag, counts
of groups by state …) is not counted here at all but computed at scrape time by
:mod:`strom.broker.observability.collector`.

Invariants:
- counters only grow while the process lives. A deleted topic's counters are folded into
  :attr:`BrokerMetrics.retired` (so the all-topics totals never go down) and its series vanish,
  as Kafka removes a deleted topic's metrics;
- request times are summed in seconds from ``time.perf_counter`` (the local time is the
  total less the others, derived when scraped); what is exposed is milliseconds, Kafka's
  unit (``TotalTimeMs`` …).

The cluster work calls :class:`ReplicationMetrics` (``broker.metrics.replication``):
``isr_shrink(topic, partition)``, ``isr_expand(...)``, ``leader_election(..., unclean=False)``,
and replaces its gauge functions (``under_replicated`` …), whose single-node values are 0, and 1
for "this broker is the active controller".
"""

from __future__ import annotations

from bisect import bisect_left as _bisect
from collections.abc import Callable

#: Upper bounds (ms) of the request-time histogram buckets; the last bucket is +Inf.
REQUEST_BUCKETS_MS: tuple[float, ...] = (
    0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000,
)  # fmt: skip
_BUCKETS_S = tuple(ms / 1000.0 for ms in REQUEST_BUCKETS_MS)  # what the hot path compares
#: API keys are below this (Kafka's highest is in the 80s); larger keys are never served.
MAX_API_KEYS = 128


class TopicCounters:
    """Kafka's ``BrokerTopicMetrics`` of one topic (or of all topics no longer there)."""

    __slots__ = (
        "messages_in", "bytes_in", "value_bytes_in", "bytes_out", "bytes_rejected",
        "produce_requests", "failed_produce_requests", "fetch_requests", "failed_fetch_requests",
    )  # fmt: skip

    def __init__(self) -> None:
        self.messages_in = 0  # records appended by Produce (duplicates of retries excluded)
        self.bytes_in = 0  # record batch bytes appended by Produce (Kafka's BytesInPerSec)
        self.value_bytes_in = 0  # the records' value bytes of those batches
        self.bytes_out = 0  # record batch bytes sent by Fetch
        self.bytes_rejected = 0  # batch bytes of appends refused (invalid, too large …)
        self.produce_requests = 0  # partitions produced to (Kafka counts per partition)
        self.failed_produce_requests = 0
        self.fetch_requests = 0  # partitions named by Fetch requests (of existing topics)
        self.failed_fetch_requests = 0

    def add(self, other: TopicCounters) -> None:
        for name in TopicCounters.__slots__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


class RequestCounters:
    """``RequestMetrics`` of one API: count, time split and histogram, errors by code."""

    __slots__ = ("count", "total_s", "queue_s", "remote_s", "buckets", "errors")

    def __init__(self) -> None:
        self.count = 0
        self.total_s = 0.0  # received -> response ready
        self.queue_s = 0.0  # received, waiting behind earlier requests of the connection
        self.remote_s = 0.0  # parked in the purgatory (a long-polling Fetch)
        self.buckets = [0] * (len(REQUEST_BUCKETS_MS) + 1)
        self.errors: dict[int, int] = {}  # error code (not NONE) -> occurrences

    @property
    def local_s(self) -> float:
        """Handled on the event loop (fsync waits included): the rest of the total."""
        return max(self.total_s - self.queue_s - self.remote_s, 0.0)


def _zero() -> int:
    return 0


def _one() -> int:
    return 1


class ReplicationMetrics:
    """Cluster-wide replication state: counters the cluster work increments, gauges it sets.

    On a single node every partition's only replica is the leader and in sync, and the broker
    is its own controller: the defaults say so. Replace a gauge by assigning a function, e.g.
    ``broker.metrics.replication.under_replicated = replica_manager.count_under_replicated``.
    """

    def __init__(self) -> None:
        self.isr_shrinks = 0
        self.isr_expands = 0
        self.leader_elections = 0
        self.leader_election_ms = 0.0
        self.unclean_leader_elections = 0
        # gauges: partitions led here with fewer in-sync replicas than replicas / than
        # min.insync.replicas; partitions without a leader (as the controller sees them);
        # whether this broker is the active controller (1/0); whether a controller is known
        self.under_replicated: Callable[[], int] = _zero
        self.under_min_isr: Callable[[], int] = _zero
        self.offline_partitions: Callable[[], int] = _zero
        self.offline_replicas: Callable[[], int] = _zero
        self.active_controller: Callable[[], int] = _one
        self.controller_known: Callable[[], bool] = lambda: True

    def isr_shrink(self, topic: str, partition: int) -> None:
        """A partition led here dropped a replica from its ISR (``IsrShrinksPerSec``)."""
        self.isr_shrinks += 1

    def isr_expand(self, topic: str, partition: int) -> None:
        """A replica caught up and joined the ISR of a partition led here (``IsrExpandsPerSec``)."""
        self.isr_expands += 1

    def leader_election(self, topic: str, partition: int, *, unclean: bool = False,
                        duration_ms: float = 0.0) -> None:  # fmt: skip
        """The controller elected a leader for a partition in ``duration_ms``
        (``LeaderElectionRateAndTimeMs``; ``UncleanLeaderElectionsPerSec`` too when the leader
        was not in the ISR)."""
        self.leader_elections += 1
        self.leader_election_ms += duration_ms
        if unclean:
            self.unclean_leader_elections += 1


class BrokerMetrics:
    """Every counter of one broker (``broker.metrics``)."""

    def __init__(self) -> None:
        self.topics: dict[str, TopicCounters] = {}
        self.retired = TopicCounters()  # counters of topics deleted since start
        self.requests = [RequestCounters() for _ in range(MAX_API_KEYS)]
        #: per listener name: connections accepted (a TLS one once its handshake succeeded)
        #: and closed; a listener is here, at 0, from its start
        self.connections_created: dict[str, int] = {}
        self.connections_closed: dict[str, int] = {}
        #: per listener name: TLS handshakes refused and SASL authentications failed (Kafka's
        #: failed-authentication-total); a TLS or SASL listener is here, at 0, from its start
        self.failed_authentication: dict[str, int] = {}
        self.replication = ReplicationMetrics()

    def authentication_failed(self, listener: str) -> None:
        """A client failed to authenticate on ``listener`` (its TLS handshake was refused, or
        its SASL authentication failed)."""
        self.failed_authentication[listener] = self.failed_authentication.get(listener, 0) + 1

    def topic(self, name: str) -> TopicCounters:
        counters = self.topics.get(name)
        if counters is None:
            counters = self.topics[name] = TopicCounters()
        return counters

    def retire_topics(self, alive: Callable[[str], bool]) -> None:
        """Fold the counters of topics for which ``alive`` is false into :attr:`retired`."""
        for name in [n for n in self.topics if not alive(n)]:
            self.retired.add(self.topics.pop(name))

    def totals(self) -> TopicCounters:
        """All topics, deleted ones included (Kafka's BrokerTopicMetrics without a topic)."""
        total = TopicCounters()
        total.add(self.retired)
        for counters in self.topics.values():
            total.add(counters)
        return total

    def request_done(self, api_key: int, arrived: float, started: float, ended: float,
                     remote: float) -> None:  # fmt: skip
        """One request of ``api_key`` answered: received at ``arrived``, taken up at
        ``started``, answered at ``ended`` (perf_counter seconds), ``remote`` seconds of it
        parked in the purgatory."""
        stats = self.requests[api_key]
        total = ended - arrived
        stats.count += 1
        stats.total_s += total
        stats.queue_s += started - arrived
        if remote:
            stats.remote_s += remote
        stats.buckets[_bisect(_BUCKETS_S, total)] += 1

    def request_error(self, api_key: int, code: int) -> None:
        """An error code (not NONE) in a response of ``api_key`` (``ErrorsPerSec``)."""
        if 0 <= api_key < MAX_API_KEYS and code:
            errors = self.requests[api_key].errors
            errors[code] = errors.get(code, 0) + 1
