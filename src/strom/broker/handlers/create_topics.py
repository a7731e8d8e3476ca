"""CreateTopics (key 19): create topics with partitions, replication factor and configs.

``num_partitions`` / ``replication_factor`` of -1 take the broker's ``num.partitions`` /
``default.replication.factor``; explicit ``assignments`` fix the partitions instead (then both
must be -1). Each topic succeeds or fails alone with Kafka's code and an error message:
TOPIC_ALREADY_EXISTS, INVALID_TOPIC_EXCEPTION, INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR
(more replicas than live brokers), INVALID_REPLICA_ASSIGNMENT, INVALID_CONFIG, INVALID_REQUEST
(a topic named twice). ``validate_only`` checks everything and creates nothing. v5+ answers
the partition count, replication factor and every effective config of the topic.

The topics of one request are created concurrently, each all or nothing
(:mod:`strom.broker.topic_lifecycle`), and the answer comes within the request's
``timeout_ms``: a topic not finished by then is answered REQUEST_TIMED_OUT and its creation
goes on (as Kafka). NONE always means the topic exists: with ``timeout_ms`` <= 0
(librdkafka's default operation timeout) the answer waits for the creation to finish, since
Kafka registers a topic before answering even then and clients use it right away.

In cluster mode (:mod:`strom.controller.admin`) the replicas are assigned over the live brokers
(rack-aware, leaders spread; explicit assignments must name live brokers), the assignment is
written to the store and the answer waits until the controller gave every partition a state.

Quota: each topic created takes its partitions from the client's ``controller_mutation_rate``
(KIP-599, :func:`strom.broker.throttling.mutation_quota`), after it is validated and before it
is created (``validate_only`` takes nothing). From v6 the quota is strict: once exhausted, a
topic is answered THROTTLING_QUOTA_EXCEEDED and not created, and the answer carries the time
until the quota is back; before v6 every topic is created and the answer is throttled.

Authorization: CREATE on the CLUSTER or on the topic, else that topic is
TOPIC_AUTHORIZATION_FAILED and not created; v5+ returns its configs only with DESCRIBE_CONFIGS on
it (else topic_config_error_code TOPIC_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import logging
import uuid
from collections import Counter
from dataclasses import dataclass
from typing import Any

from strom.broker import authz, dispatch, throttling
from strom.broker import config_resources as cr
from strom.broker.context import RequestContext
from strom.metadata.topics import validate_topic_name
from strom.protocol.errors import ErrorCode, KafkaError, error_code_of

API_KEY = 19
log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Plan:
    name: str
    partitions: int
    replication_factor: int
    configs: dict[str, str]
    assignment: dict[int, list[int]] | None = None


def _collides(ctx: RequestContext, name: str) -> str | None:
    """An existing topic that differs only by '.' vs '_' (their metric names collide)."""
    if "." not in name and "_" not in name:
        return None
    key = name.replace(".", "_")
    for info in ctx.topics:
        if info.name != name and info.name.replace(".", "_") == key:
            return info.name
    return None


def _plan(ctx: RequestContext, topic: Any, brokers: list[int]) -> _Plan:
    name = topic.name
    validate_topic_name(name)
    if ctx.topics.get(name) is not None or ctx.topics.busy(name):
        raise KafkaError(ErrorCode.topic_already_exists, f"Topic '{name}' already exists.")
    other = _collides(ctx, name)
    if other is not None:
        raise KafkaError(
            ErrorCode.invalid_topic_exception,
            f"Topic '{name}' collides with existing topic: {other}",
        )
    num_partitions = int(topic.num_partitions)
    rf = int(topic.replication_factor)
    assignment = None
    if topic.assignments:
        if num_partitions != -1 or rf != -1:
            raise KafkaError(
                ErrorCode.invalid_request,
                "Both numPartitions or replicationFactor and replicasAssignments were set. "
                "Both cannot be used at the same time.",
            )
        indexes = sorted(a.partition_index for a in topic.assignments)
        if indexes != list(range(len(indexes))):
            raise KafkaError(
                ErrorCode.invalid_replica_assignment,
                "Partitions should be a consecutive 0-based integer sequence",
            )
        sizes = set()
        for a in topic.assignments:
            replicas = [int(b) for b in a.broker_ids]
            if not replicas:
                raise KafkaError(
                    ErrorCode.invalid_replica_assignment,
                    f"Partition {a.partition_index} has an empty replica list",
                )
            if len(set(replicas)) != len(replicas):
                raise KafkaError(
                    ErrorCode.invalid_replica_assignment,
                    f"Duplicate brokers not allowed in replica assignment: {replicas} "
                    f"for partition id {a.partition_index}.",
                )
            unknown = [b for b in replicas if b not in brokers]
            if unknown:
                raise KafkaError(
                    ErrorCode.invalid_replica_assignment,
                    f"Unknown broker(s) {unknown} in the assignment of partition "
                    f"{a.partition_index}",
                )
            sizes.add(len(replicas))
        if len(sizes) > 1:
            raise KafkaError(
                ErrorCode.invalid_replica_assignment,
                "All partitions should have the same number of replicas",
            )
        num_partitions, rf = len(indexes), sizes.pop()
        assignment = {int(a.partition_index): [int(b) for b in a.broker_ids]
                      for a in topic.assignments}  # fmt: skip
    else:
        if num_partitions == -1:
            num_partitions = ctx.config.get_int("num.partitions")
        if rf == -1:
            rf = ctx.config.get_int("default.replication.factor")
        if num_partitions <= 0:
            raise KafkaError(
                ErrorCode.invalid_partitions, "Number of partitions must be larger than 0."
            )
        if rf <= 0:
            raise KafkaError(
                ErrorCode.invalid_replication_factor, "Replication factor must be larger than 0."
            )
        if rf > len(brokers):
            raise KafkaError(
                ErrorCode.invalid_replication_factor,
                f"Unable to replicate the partition {rf} time(s): The target replication factor "
                f"of {rf} cannot be reached because only {len(brokers)} broker(s) are registered.",
            )
    wanted: dict[str, str | None] = {}
    for config in topic.configs:
        if config.name in wanted:
            raise KafkaError(ErrorCode.invalid_config, f"Duplicate topic config: {config.name}")
        wanted[config.name] = config.value
    configs = cr.validate_overrides(ctx.configs, wanted)
    return _Plan(name, num_partitions, rf, configs, assignment)


def _result(
    ctx: RequestContext, name: str, code: ErrorCode, message: str | None, **extra: Any
) -> Any:
    return ctx.make(
        "CreatableTopicResult",
        name=name,
        topic_id=extra.get("topic_id", uuid.UUID(int=0)),
        error_code=code,
        error_message=message,
        num_partitions=extra.get("num_partitions", -1),
        replication_factor=extra.get("replication_factor", -1),
        configs=extra.get("configs", ()),
        topic_config_error_code=extra.get("topic_config_error_code", ErrorCode.none),
    )


def _config_results(ctx: RequestContext, overrides: dict[str, str]) -> tuple[Any, ...]:
    return tuple(
        ctx.make(
            "CreatableTopicConfigs",
            name=e.name,
            value=e.value,
            read_only=e.read_only,
            config_source=e.source,
            is_sensitive=e.sensitive,
        )
        for e in cr.describe_topic(ctx.configs, overrides)
    )


def _timeout_s(request: Any) -> float:
    timeout = request.timeout
    if isinstance(timeout, datetime.timedelta):
        return timeout.total_seconds()
    return int(timeout) / 1000.0


def _log_outcome(name: str, task: asyncio.Task[Any]) -> None:
    """For creations the response stopped waiting for: their failure is only logged."""
    if task.cancelled():
        return
    exc = task.exception()
    if exc is not None:
        log.error("creating topic %s (after its request timed out) failed: %s", name, exc)


@dispatch.handler(API_KEY, 2, 7)
async def handle(ctx: RequestContext, request: Any) -> Any:
    validate_only = bool(request.validate_only)
    counts = Counter(t.name for t in request.topics)
    results: list[Any] = []
    creating: list[tuple[int, _Plan, asyncio.Task[Any]]] = []
    done: set[str] = set()
    live = await ctx.topics.live_brokers()
    may_create_any = authz.authorize_cluster(ctx, authz.CREATE)
    quota = throttling.mutation_quota(ctx)
    for topic in request.topics:
        name = topic.name
        if counts[name] > 1:
            if name not in done:
                done.add(name)
                results.append(
                    _result(
                        ctx,
                        name,
                        ErrorCode.invalid_request,
                        f"Create topics request contains multiple entries for topic {name}",
                    )
                )
            continue
        if not (may_create_any or authz.authorize(ctx, authz.CREATE, authz.TOPIC, name)):
            results.append(_result(ctx, name, ErrorCode.topic_authorization_failed,
                                   f"not authorized to create topic {name}"))  # fmt: skip
            continue
        try:
            plan = _plan(ctx, topic, sorted(live))
        except Exception as exc:
            results.append(_failed(ctx, name, exc))
            continue
        if validate_only:
            results.append(_created(ctx, plan, uuid.UUID(int=0)))
            continue
        try:
            quota.record(plan.partitions)
        except KafkaError as exc:  # THROTTLING_QUOTA_EXCEEDED (strict)
            results.append(_failed(ctx, name, exc))
            continue
        task = asyncio.ensure_future(ctx.topics.create_assigned(
            plan.name, plan.partitions, plan.replication_factor, plan.configs, plan.assignment,
            live, _timeout_s(request)))  # fmt: skip
        creating.append((len(results), plan, task))
        results.append(None)
    if creating:
        timeout = _timeout_s(request)
        tasks = {task for _i, _p, task in creating}
        await asyncio.wait(tasks, timeout=timeout if timeout > 0 else None)
        for i, plan, task in creating:
            if not task.done():
                task.add_done_callback(functools.partial(_log_outcome, plan.name))
                results[i] = _result(
                    ctx, plan.name, ErrorCode.request_timed_out,
                    f"Topic '{plan.name}' was not created within {timeout:g}s; "
                    "its creation goes on.",
                )  # fmt: skip
            elif task.exception() is not None:
                results[i] = _failed(ctx, plan.name, task.exception())
            else:
                results[i] = _created(ctx, plan, task.result())
    return ctx.respond(throttle_time=quota.throttle_ms(), topics=tuple(results))


def _failed(ctx: RequestContext, name: str, exc: BaseException | None) -> Any:
    code = error_code_of(exc) if exc is not None else ErrorCode.unknown_server_error
    if code == ErrorCode.unknown_server_error:
        log.error("creating topic %s failed", name, exc_info=exc)
    return _result(ctx, name, code, str(exc))


def _created(ctx: RequestContext, plan: _Plan, topic_id: uuid.UUID) -> Any:
    # v5+ returns the topic's configs only to a principal that may DESCRIBE_CONFIGS it
    described = authz.authorize(ctx, authz.DESCRIBE_CONFIGS, authz.TOPIC, plan.name)
    return _result(
        ctx,
        plan.name,
        ErrorCode.none,
        None,
        topic_id=topic_id,
        num_partitions=plan.partitions,
        replication_factor=plan.replication_factor,
        configs=_config_results(ctx, plan.configs) if ctx.api_version >= 5 and described else (),
        topic_config_error_code=(ErrorCode.none if described
                                 else ErrorCode.topic_authorization_failed),
    )
