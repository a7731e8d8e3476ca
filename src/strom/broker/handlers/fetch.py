"""Fetch (key 1): serve stored batches as bytes, with Kafka's long-poll.

Rules kept from Kafka (KIP-74 and the protocol guide):
- a read starts at the batch *containing* the fetch offset (the client skips the records
  before its offset), and never returns batches at or above the high watermark;
- ``partition_max_bytes`` and the response's ``max_bytes`` bound the data, except that the first
  partition with data returns at least one whole batch, so a batch larger than the limits
  still makes progress;
- when fewer than ``min_bytes`` are ready, the request waits in the purgatory until an append
  to one of its partitions or ``max_wait_ms``, then reads again;
- ``session_id`` 0 in the response: no incremental fetch session is created, so every fetch is
  a full one (clients fall back to that by design).
Topic ids (v13+) are resolved through the topic registry. A partition's
``current_leader_epoch`` (v9+) is checked first: FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH
(:mod:`strom.broker.leader_epochs`).

With ``strom.fetch.sendfile.enable`` (:mod:`strom.broker.zero_copy`) the records are not read:
each partition's data becomes a file region (a duplicated fd, position, length) and its
``records`` a placeholder, and the server sends the regions with ``sendfile``.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from strom.broker import dispatch, zero_copy
from strom.broker.context import RequestContext
from strom.broker.leader_epochs import check_current_leader_epoch
from strom.protocol.errors import ErrorCode, error_code_of
from strom.protocol.hot_path import FetchPartition, FetchResponse, FetchTopic

API_KEY = 1
log = logging.getLogger(__name__)


_NULL_TOPIC_ID = uuid.UUID(int=0)


def _partition(ctx: RequestContext, index: int, code: ErrorCode, *, hw: int = -1,
               log_start: int = -1, records: Any = b"") -> FetchPartition:
    # A plain tuple, encoded by strom.protocol.hot_path (kio's generic build and encode cost
    # ~7 µs a partition); ``records`` is bytes or a zero-copy file region.
    return FetchPartition(index, code, hw, hw, log_start, None, -1, records)


class _FetchPlan:
    """One pass over the requested partitions; reused on every wake-up of a long poll."""

    def __init__(self, ctx: RequestContext, request: Any) -> None:
        self.ctx = ctx
        self.request = request
        self.max_bytes = int(getattr(request, "max_bytes", 2**31 - 1))
        self.by_id = ctx.api_version >= 13
        self.zero_copy = zero_copy.enabled(ctx.broker.config)
        self.regions: list[zero_copy.FileRegion] = []  # of the latest read, in order
        self.keys: list[tuple[str, int]] = []
        for topic in request.topics:
            name = self._name(topic)
            if name is not None:
                self.keys.extend((name, p.partition) for p in topic.partitions)

    def _name(self, topic: Any) -> str | None:
        if self.by_id:
            info = self.ctx.broker.topics.by_id(topic.topic_id)
            return info.name if info else None
        return str(topic.topic)

    def read(self) -> tuple[Any, int, bool]:
        """(per-topic responses, bytes read, whether any partition has an error)."""
        ctx = self.ctx
        self.close_regions()
        total = 0
        errors = False
        responses = []
        for topic in self.request.topics:
            name = self._name(topic)
            parts = []
            for p in topic.partitions:
                if name is None:
                    parts.append(_partition(ctx, p.partition, ErrorCode.unknown_topic_id))
                    errors = True
                    continue
                part, size = self._read_partition(name, p, total)
                errors = errors or part.error_code != ErrorCode.none
                total += size
                parts.append(part)
            topic_id = getattr(topic, "topic_id", None) or _NULL_TOPIC_ID
            responses.append(FetchTopic(name or "", topic_id, parts))
        return responses, total, errors

    def _read_partition(self, topic: str, p: Any, total: int) -> tuple[Any, int]:
        ctx = self.ctx
        try:
            log_ = ctx.broker.replicas.get_log(topic, p.partition)
        except Exception as exc:
            return _partition(ctx, p.partition, error_code_of(exc)), 0
        epoch_error = check_current_leader_epoch(getattr(p, "current_leader_epoch", -1))
        if epoch_error != ErrorCode.none:
            return _partition(ctx, p.partition, epoch_error), 0
        hw = log_.high_watermark
        start = log_.log_start_offset
        offset = int(p.fetch_offset)
        if offset < start or offset > log_.log_end_offset:
            return _partition(ctx, p.partition, ErrorCode.offset_out_of_range, hw=hw, log_start=start), 0
        budget = min(int(p.partition_max_bytes), self.max_bytes - total)
        if offset >= hw or (budget <= 0 and total > 0):
            return _partition(ctx, p.partition, ErrorCode.none, hw=hw, log_start=start), 0
        try:
            if self.zero_copy:
                return self._read_region(log_, p.partition, offset, budget, total, hw, start)
            result = log_.read(offset, max(budget, 0), max_offset=hw, min_one_batch=total == 0)
        except Exception as exc:
            code = error_code_of(exc)
            if code == ErrorCode.unknown_server_error:
                log.exception("read of %s-%s at %s failed", topic, p.partition, offset)
            return _partition(ctx, p.partition, code, hw=hw, log_start=start), 0
        records = result.records
        return _partition(ctx, p.partition, ErrorCode.none, hw=hw, log_start=start, records=records), len(records)

    def _read_region(self, log_: Any, index: int, offset: int, budget: int, total: int,
                     hw: int, start: int) -> tuple[Any, int]:  # fmt: skip
        region = zero_copy.read_region(log_, offset, max(budget, 0), max_offset=hw,
                                       min_one_batch=total == 0)  # fmt: skip
        if region is None:
            return _partition(self.ctx, index, ErrorCode.none, hw=hw, log_start=start), 0
        self.regions.append(region)
        part = _partition(self.ctx, index, ErrorCode.none, hw=hw, log_start=start, records=region)
        return part, region.length

    def close_regions(self) -> None:
        for region in self.regions:
            region.close()
        self.regions = []


@dispatch.handler(API_KEY, 4, 16)
async def handle(ctx: RequestContext, request: Any) -> Any:
    plan = _FetchPlan(ctx, request)
    loop_time = ctx.broker.clock.monotonic
    max_wait = request.max_wait.total_seconds()
    deadline = loop_time() + max_wait
    min_bytes = max(int(request.min_bytes), 0)
    try:
        while True:
            responses, total, errors = plan.read()
            remaining = deadline - loop_time()
            if total >= min_bytes or errors or remaining <= 0 or not plan.keys:
                break
            if not await ctx.broker.replicas.purgatory.wait(plan.keys, remaining):
                responses, total, errors = plan.read()
                break
        response = FetchResponse(responses)
    except BaseException:
        plan.close_regions()
        raise
    if plan.regions:
        return zero_copy.SplicedResponse(response, plan.regions)
    return response
