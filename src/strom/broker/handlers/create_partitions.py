"""CreatePartitions (key 37): add partitions to existing topics.

Only increases: a count equal to or below the current one is INVALID_PARTITIONS with Kafka's
message. Explicit ``assignments`` must name one replica list per new partition, on live
brokers, with the topic's replication factor (else INVALID_REPLICA_ASSIGNMENT). With
``validate_only`` nothing changes. A topic named twice is INVALID_REQUEST.

The new partitions are made all or nothing, their files on a worker thread
(:mod:`strom.broker.topic_lifecycle`); a resource failure answers KAFKA_STORAGE_ERROR and
changes nothing. The answer comes within ``timeout_ms`` (REQUEST_TIMED_OUT, the growth
goes on), as CreateTopics.

Quota: the partitions added to a topic are taken from the client's ``controller_mutation_rate``
(KIP-599) once the growth is validated, before it is made (``validate_only`` takes nothing); from
v3 strictly (once exhausted, THROTTLING_QUOTA_EXCEEDED and nothing is added), before v3 the
answer is only throttled. In cluster mode the controller validates the growth: the partitions
are taken when the broker's metadata shows the topic with fewer partitions than asked for.

Authorization: ALTER on each topic, else TOPIC_AUTHORIZATION_FAILED and no partition is added.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Any

from strom.broker import authz, dispatch, throttling
from strom.broker.context import RequestContext
from strom.protocol.errors import ErrorCode, KafkaError, error_code_of
from strom.security.quotas import MutationQuota

API_KEY = 37
log = logging.getLogger(__name__)


async def _grow(ctx: RequestContext, topic: Any, validate_only: bool, timeout: float,
                quota: MutationQuota) -> None:  # fmt: skip
    authz.require(ctx, authz.ALTER, authz.TOPIC, str(topic.name))
    topics = ctx.topics
    node_id = ctx.node.node_id
    if topics.cluster:  # cluster mode: the controller makes them (strom.controller.admin)
        known = topics.get(topic.name)
        if not validate_only and known is not None and int(topic.count) > known.partition_count:
            quota.record(int(topic.count) - known.partition_count)
        assignment = None
        if topic.assignments is not None and len(topic.assignments) > 0:
            assignment = [[int(b) for b in a.broker_ids] for a in topic.assignments]
        await topics.add_partitions_in_cluster(topic.name, int(topic.count), assignment, timeout,
                                               validate_only)  # fmt: skip
        return
    info = topics.get(topic.name)
    if info is None:
        raise KafkaError(
            ErrorCode.unknown_topic_or_partition, f"Topic '{topic.name}' does not exist."
        )
    current, count = info.partition_count, int(topic.count)
    if count < current:
        raise KafkaError(
            ErrorCode.invalid_partitions,
            f"Topic currently has {current} partitions, which is higher than the requested {count}.",
        )
    if count == current:
        raise KafkaError(ErrorCode.invalid_partitions, f"Topic already has {current} partitions.")
    rf = len(next(iter(info.replicas.values()), [node_id])) or 1
    brokers = {node_id}
    new: dict[int, list[int]] = {}
    if topic.assignments is not None and len(topic.assignments) > 0:
        if len(topic.assignments) != count - current:
            raise KafkaError(
                ErrorCode.invalid_replica_assignment,
                f"Increasing the number of partitions by {count - current} but "
                f"{len(topic.assignments)} assignments provided.",
            )
        for offset, assignment in enumerate(topic.assignments):
            replicas = [int(b) for b in assignment.broker_ids]
            partition = current + offset
            if len(replicas) != rf or len(set(replicas)) != len(replicas):
                raise KafkaError(
                    ErrorCode.invalid_replica_assignment,
                    f"Inconsistent replication factor between partitions, partition 0 has {rf} "
                    f"while partition {partition} has replicas {replicas}.",
                )
            unknown = sorted(set(replicas) - brokers)
            if unknown:
                raise KafkaError(
                    ErrorCode.invalid_replica_assignment,
                    f"Unknown broker(s) {unknown} in the assignment of partition {partition}",
                )
            new[partition] = replicas
    else:
        if rf > len(brokers):
            raise KafkaError(
                ErrorCode.invalid_replication_factor,
                f"Unable to replicate the partition {rf} time(s) with {len(brokers)} broker(s).",
            )
        new = {p: [node_id] for p in range(current, count)}
    if validate_only:
        return
    quota.record(count - current)
    await topics.add_partitions(info.name, new)
    log.info("topic %s grew from %d to %d partitions", info.name, current, count)


def _timeout_s(request: Any) -> float:
    timeout = request.timeout
    if hasattr(timeout, "total_seconds"):
        return float(timeout.total_seconds())
    return int(timeout) / 1000.0


def _log_outcome(task: asyncio.Future[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("adding partitions (after the request timed out) failed: %s", task.exception())


@dispatch.handler(API_KEY, 0, 3)
async def handle(ctx: RequestContext, request: Any) -> Any:
    counts = Counter(t.name for t in request.topics)
    results = []
    reported: set[str] = set()
    quota = throttling.mutation_quota(ctx)
    for topic in request.topics:
        if counts[topic.name] > 1:
            if topic.name in reported:
                continue
            reported.add(topic.name)
            code, message = ErrorCode.invalid_request, "Duplicate topic in request."
        else:
            try:
                timeout = _timeout_s(request)  # <= 0: wait (NONE means they exist)
                task = asyncio.ensure_future(
                    _grow(ctx, topic, bool(request.validate_only), timeout, quota))
                await asyncio.wait({task}, timeout=timeout if timeout > 0 else None)
                if not task.done():
                    task.add_done_callback(_log_outcome)
                    raise KafkaError(
                        ErrorCode.request_timed_out,
                        f"Partitions of '{topic.name}' not created within {timeout:g}s; "
                        "their creation goes on.",
                    )
                task.result()
                code, message = ErrorCode.none, None
            except Exception as exc:
                code, message = error_code_of(exc), str(exc)
                if code == ErrorCode.unknown_server_error:
                    log.exception("adding partitions to %s failed", topic.name)
        results.append(
            ctx.make(
                "CreatePartitionsTopicResult",
                name=topic.name,
                error_code=code,
                error_message=message,
            )
        )
    return ctx.respond(throttle_time=quota.throttle_ms(), results=tuple(results))
