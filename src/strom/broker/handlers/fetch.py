"""Fetch (key 1): serve stored batches as bytes, with Kafka's long-poll.

Rules kept from Kafka (KIP-74 and the protocol guide):
- a read starts at the batch *containing* the fetch offset (the client skips the records
  before its offset), and never returns batches at or above the high watermark;
- ``partition_max_bytes`` and the response's ``max_bytes`` bound the data, except that the first
  partition with data returns at least one whole batch, so a batch larger than the limits
  still makes progress;
- when fewer than ``min_bytes`` are ready, the request waits in the purgatory until an append
  to one of its partitions or ``max_wait_ms``, then reads again: only the partitions that
  changed (a caught-up partition's answer is reused while its log is unchanged);
- ``isolation_level`` 1 (read_committed, v4+): reads stop at the last stable offset instead
  of the high watermark, and the aborted transactions overlapping the range read are listed
  so the client drops their batches (the LSO is reported under both levels, as Kafka);
- incremental fetch sessions (KIP-227, :mod:`strom.broker.fetch_session`): a request may open
  a session, then send only the partitions that changed; its response holds only the
  partitions with news.
Topic ids (v13+) are resolved through the topic registry. The partition's leader serves it;
from v11 a follower serves consumers too, up to its own high watermark, and the leader may
send a consumer that names its rack to a follower in that rack (KIP-392,
:mod:`strom.replication.replica_selector`: the partition comes back empty with
``preferred_read_replica`` set, at once); anywhere else NOT_LEADER_OR_FOLLOWER. A partition's
``current_leader_epoch`` (v9+) is checked first: FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH
(:meth:`Partition.check_leader_epoch`).
A follower's fetch (``replica_id`` >= 0; v15+ ``replica_state.replica_id``) reads up to the log
end offset instead of the high watermark, and its fetch offset tells the leader its log end
offset (:meth:`ReplicaManager.follower_fetched`: HW, ISR expansion, acks=all waiters).

With ``strom.fetch.sendfile.enable`` (:mod:`strom.broker.zero_copy`) the records are not read:
each partition's data becomes a file region (a duplicated fd, position, length), which the
response carries as its ``records`` (:mod:`strom.protocol.hot_path` writes its length and
leaves its bytes to the server, which sends them with ``sendfile``).

Authorization: READ on each topic, else its partitions are TOPIC_AUTHORIZATION_FAILED (nothing
read); a follower's fetch needs CLUSTER_ACTION on the CLUSTER, else every partition is
TOPIC_AUTHORIZATION_FAILED, as Kafka answers it.
"""

from __future__ import annotations

import logging
import uuid
from time import perf_counter
from typing import Any

from strom.broker import authz, dispatch, fetch_session, zero_copy
from strom.broker.context import RequestContext
from strom.protocol.errors import ErrorCode, error_code_of
from strom.protocol.hot_path import FetchPartition, FetchResponse, FetchTopic
from strom.replication.replica_selector import preferred_read_replica
from strom.security.quotas import sanitize, user_name
from strom.storage.log import Log

API_KEY = 1
log = logging.getLogger(__name__)


_NULL_TOPIC_ID = uuid.UUID(int=0)


def _partition(ctx: RequestContext, index: int, code: ErrorCode, *, hw: int = -1,
               log_start: int = -1, records: bytes | zero_copy.FileRegion = b"",
               lso: int | None = None,
               aborted: tuple[tuple[int, int], ...] | None = None,
               read_replica: int = -1) -> FetchPartition:  # fmt: skip
    # A plain tuple, encoded by strom.protocol.hot_path (kio's generic build and encode cost
    # ~7 µs a partition); ``records`` is bytes or a zero-copy file region, ``aborted`` holds
    # (producer id, first offset) pairs.
    if code:
        ctx.metrics.request_error(API_KEY, code)
    return FetchPartition(index, code, hw, hw if lso is None else lso, log_start, aborted,
                          read_replica, records)  # fmt: skip


def _replica_id(ctx: RequestContext, request: Any) -> int:
    """The follower's broker id (v15+ in ``replica_state``), -1 for consumers."""
    if ctx.api_version >= 15:
        state = getattr(request, "replica_state", None)
        return int(state.replica_id) if state is not None else -1
    return int(getattr(request, "replica_id", -1))


def _quota_cap(ctx: RequestContext) -> int:
    """What a consumer's ``consumer_byte_rate`` quota window holds (Kafka's
    ``getMaxValueInQuotaWindow``): a larger answer would be throttled whatever came before."""
    quotas = ctx.services.quotas.quotas
    cap = quotas.fetch.max_value_in_window(sanitize(user_name(ctx.principal)), ctx.client_id)
    return 2**31 - 1 if cap is None else max(int(cap), 1)


class _CaughtUp:
    """A partition's answer while the fetch offset is at the high watermark: no data, no
    error. Valid as long as its log, high watermark and log start offset stay the same."""

    __slots__ = ("log", "hw", "start", "part")

    def __init__(self, log_: Log, hw: int, start: int, part: FetchPartition) -> None:
        self.log, self.hw, self.start, self.part = log_, hw, start, part

    def still_valid(self, log_: Log | None) -> bool:
        return log_ is self.log and log_.high_watermark == self.hw and (
            log_.log_start_offset == self.start
        )


class _FetchPlan:
    """One pass over the requested partitions; reused on every wake-up of a long poll.

    A wake-up re-reads only the partitions the purgatory reports as changed: the others'
    "caught up" answers (most of a long poll's partitions) are reused after a check of their
    log's high watermark and start offset; partitions that had data are read again (their
    byte budget depends on the partitions before them)."""

    def __init__(self, ctx: RequestContext, request: Any, topics: list[Any]) -> None:
        self.ctx = ctx
        self.request = request
        self.topics = topics  # the request's, or its fetch session's (fetch_session)
        self.max_bytes = int(getattr(request, "max_bytes", 2**31 - 1))
        self.by_id = ctx.api_version >= 13
        self.read_committed = int(getattr(request, "isolation_level", 0)) == 1
        # a TLS connection cannot sendfile: its records are read and written in parts
        self.zero_copy = (zero_copy.enabled(ctx.config)
                          and ctx.client.security_protocol in zero_copy.PLAIN_PROTOCOLS)
        self.regions: list[zero_copy.FileRegion] = []  # of the latest read, in order
        self.keys: list[tuple[str, int]] = []
        self.names = [self._name(topic) for topic in topics]
        self.caught_up: dict[tuple[str, int], _CaughtUp] = {}
        self.reads = 0  # partitions read (not reused), for tests and profiling
        self.sent: list[tuple[str, int]] = []  # (topic, batch bytes) of the latest read
        metrics = ctx.metrics
        known = ctx.topics
        self.replica_id = _replica_id(ctx, request)
        if self.replica_id < 0 and ctx.services.quotas.quotas.active:
            self.max_bytes = min(self.max_bytes, _quota_cap(ctx))
        # KIP-392: a consumer (v11+) may read from a follower; its leader may send it to one
        self.from_followers = self.replica_id < 0 and ctx.api_version >= 11
        self.client_rack = str(getattr(request, "rack_id", "") or "")
        #: topics the principal may not read (a follower: every topic unless CLUSTER_ACTION)
        self.denied: set[str] = set()
        if ctx.services.authorizer is not None:
            wanted = {n for n in self.names if n is not None}
            if self.replica_id >= 0:
                self.denied = set() if authz.authorize_cluster(ctx, authz.CLUSTER_ACTION) else wanted
            else:
                self.denied = wanted - authz.allowed_names(ctx, authz.READ, authz.TOPIC, wanted)
        for topic, name in zip(topics, self.names, strict=True):
            if name in self.denied:
                continue
            if name is not None:
                self.keys.extend((name, p.partition) for p in topic.partitions)
                if name in known:  # no counters for names a client made up
                    metrics.topic(name).fetch_requests += len(topic.partitions)

    def _name(self, topic: Any) -> str | None:
        if self.by_id:
            info = self.ctx.topics.by_id(topic.topic_id)
            return info.name if info else None
        return str(topic.topic)

    def read(self, changed: set[Any] | None = None) -> tuple[Any, int, bool]:
        """(per-topic responses, bytes read, whether any partition has an error).

        ``changed``: the partitions appended to since the previous read (None: all)."""
        ctx = self.ctx
        self.close_regions()
        if changed is None:
            self.caught_up.clear()
        logs = ctx.logs
        total = 0
        errors = False
        responses = []
        self.sent.clear()
        for topic, name in zip(self.topics, self.names, strict=True):
            parts = []
            for p in topic.partitions:
                if name is None:
                    parts.append(_partition(ctx, p.partition, ErrorCode.unknown_topic_id))
                    errors = True
                    continue
                if name in self.denied:
                    parts.append(_partition(ctx, p.partition, ErrorCode.topic_authorization_failed))
                    errors = True
                    continue
                key = (name, p.partition)
                cached = self.caught_up.get(key)
                if (
                    cached is not None
                    and changed is not None
                    and key not in changed
                    and cached.still_valid(logs.get(name, p.partition))
                ):
                    parts.append(cached.part)
                    continue
                part, size = self._read_partition(name, p, total)
                if part.error_code != ErrorCode.none:
                    errors = True
                    if name in ctx.topics:
                        ctx.metrics.topic(name).failed_fetch_requests += 1
                elif part.preferred_read_replica >= 0:
                    errors = True  # answered at once, as Kafka does (no long poll)
                if size:
                    self.sent.append((name, size))
                total += size
                parts.append(part)
            topic_id = getattr(topic, "topic_id", None) or _NULL_TOPIC_ID
            responses.append(FetchTopic(name or "", topic_id, parts))
        return responses, total, errors

    def _read_partition(self, topic: str, p: Any, total: int) -> tuple[Any, int]:
        ctx = self.ctx
        self.reads += 1
        self.caught_up.pop((topic, p.partition), None)
        replicas = ctx.replicas
        try:
            leader = replicas.replica_partition(topic, p.partition,
                                                int(getattr(p, "current_leader_epoch", -1)),
                                                followers=self.from_followers)  # fmt: skip
        except Exception as exc:
            return _partition(ctx, p.partition, error_code_of(exc)), 0
        log_ = leader.log
        offset = int(p.fetch_offset)
        if self.replica_id >= 0:  # a follower: its fetch offset is its log end offset
            replicas.follower_fetched(leader, self.replica_id, offset)
        hw = log_.high_watermark
        lso = log_.last_stable_offset
        bound = log_.log_end_offset if self.replica_id >= 0 else (
            lso if self.read_committed else hw)  # fmt: skip
        start = log_.log_start_offset
        if offset < start or offset > log_.log_end_offset:
            return _partition(ctx, p.partition, ErrorCode.offset_out_of_range, hw=hw, log_start=start), 0
        if leader.is_leader and self.from_followers and ctx.services.replica_selector:
            preferred = preferred_read_replica(ctx.services.replica_selector, leader,
                                               replicas.cache, self.client_rack, offset)  # fmt: skip
            if preferred >= 0:  # no records: the client fetches from there next
                return _partition(ctx, p.partition, ErrorCode.none, hw=hw, log_start=start,
                                  lso=lso, read_replica=preferred), 0  # fmt: skip
        if offset >= bound:  # caught up: valid until an append moves the HW (and the LSO)
            part = _partition(ctx, p.partition, ErrorCode.none, hw=hw, log_start=start, lso=lso,
                              aborted=self._aborted(log_, offset, bound))  # fmt: skip
            self.caught_up[(topic, p.partition)] = _CaughtUp(log_, hw, start, part)
            return part, 0
        budget = min(int(p.partition_max_bytes), self.max_bytes - total)
        aborted = self._aborted(log_, offset, bound)
        if budget <= 0 and total > 0:
            return _partition(ctx, p.partition, ErrorCode.none, hw=hw, log_start=start, lso=lso,
                              aborted=aborted), 0  # fmt: skip
        try:
            if self.zero_copy and len(self.regions) < zero_copy.MAX_REGIONS:
                return self._read_region(log_, p.partition, offset, budget, total, hw, start,
                                         lso, bound, aborted)  # fmt: skip
            result = log_.read(offset, max(budget, 0), max_offset=bound, min_one_batch=total == 0)
        except Exception as exc:
            code = error_code_of(exc)
            if code == ErrorCode.unknown_server_error:
                log.exception("read of %s-%s at %s failed", topic, p.partition, offset)
            return _partition(ctx, p.partition, code, hw=hw, log_start=start), 0
        records = result.records
        return _partition(ctx, p.partition, ErrorCode.none, hw=hw, log_start=start,
                          records=records, lso=lso, aborted=aborted), len(records)  # fmt: skip

    def _aborted(self, log_: Log, offset: int, bound: int) -> tuple[tuple[int, int], ...] | None:
        """read_committed: the aborted transactions overlapping ``[offset, bound)``, as
        (producer id, first offset)."""
        if not self.read_committed:
            return None
        return tuple((t.producer_id, t.first_offset) for t in log_.collect_aborted(offset, bound))

    def _read_region(self, log_: Log, index: int, offset: int, budget: int, total: int,
                     hw: int, start: int, lso: int, bound: int,
                     aborted: tuple[Any, ...] | None) -> tuple[Any, int]:  # fmt: skip
        region = zero_copy.read_region(log_, offset, max(budget, 0), max_offset=bound,
                                       min_one_batch=total == 0)  # fmt: skip
        if region is None:
            return _partition(self.ctx, index, ErrorCode.none, hw=hw, log_start=start, lso=lso,
                              aborted=aborted), 0  # fmt: skip
        if isinstance(region, bytes):  # small: copied (zero_copy.COPY_BELOW)
            return _partition(self.ctx, index, ErrorCode.none, hw=hw, log_start=start,
                              records=region, lso=lso, aborted=aborted), len(region)  # fmt: skip
        self.regions.append(region)
        part = _partition(self.ctx, index, ErrorCode.none, hw=hw, log_start=start,
                          records=region, lso=lso, aborted=aborted)  # fmt: skip
        return part, region.length

    def close_regions(self) -> None:
        for region in self.regions:
            region.close()
        self.regions = []


@dispatch.handler(API_KEY, 4, 18)
async def handle(ctx: RequestContext, request: Any) -> Any:
    session = fetch_session.open_context(ctx.services.fetch_sessions, request, ctx.api_version,
                                         ctx.clock.time_ms())  # fmt: skip
    if isinstance(session, ErrorCode):
        return FetchResponse([], error_code=session)
    plan = _FetchPlan(ctx, request, session.topics)
    loop_time = ctx.clock.monotonic
    max_wait = request.max_wait.total_seconds()
    deadline = loop_time() + max_wait
    min_bytes = max(int(request.min_bytes), 0)
    try:
        responses, total, errors = plan.read()
        while total < min_bytes and not errors and plan.keys:
            remaining = deadline - loop_time()
            if remaining <= 0:
                break
            # re-read what changed (or, at the deadline, only what is not caught up)
            parked = perf_counter()
            changed = await ctx.replicas.purgatory.wait(plan.keys, remaining)
            ctx.remote_time += perf_counter() - parked
            responses, total, errors = plan.read(changed)
        response = FetchResponse(session.filter(responses), session_id=session.session_id)
    except BaseException:
        plan.close_regions()
        raise
    if plan.sent:
        metrics = ctx.metrics
        for name, size in plan.sent:
            metrics.topic(name).bytes_out += size
    if plan.regions:
        return zero_copy.SplicedResponse(response, plan.regions)
    return response
