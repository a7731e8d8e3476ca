"""DescribeTopicPartitions (key 75, v0; KIP-966): topics and their partitions, paginated.

What Kafka's admin client (``describeTopics``) and ``kafka-topics --describe`` use since 3.8,
and kafka-python's ``describe_topic_partitions``. Kafka's rules
(``DescribeTopicPartitionsRequestHandler``, ``KRaftMetadataCache``):

* the topics asked for, or every topic when the list is empty, sorted by name, from the
  cursor's topic on (a cursor naming a topic the list lacks, or a negative partition, is
  INVALID_REQUEST for every topic asked);
* at most ``min(response_partition_limit, max.request.partition.size.limit)`` partitions (at
  least 1) per answer: when a topic's partitions do not all fit, ``next_cursor`` names the
  topic and the first partition left out; when the limit is reached exactly at a topic's end,
  it names the next topic at partition 0;
* an unknown topic asked by name is UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION for a
  name Kafka refuses), with the null topic id; with the whole list asked, only existing topics;
* each partition: leader (-1 with LEADER_NOT_AVAILABLE while the controller has not elected
  one), leader epoch, replicas, ISR, offline replicas; no eligible leader replicas (ELR,
  KIP-966's other half, is KRaft's): *empty* lists, as Kafka answers when it is off (the
  schema allows null, but Kafka's Java admin client reads both lists unguarded and fails
  ``describeTopics`` with a NullPointerException on a null one);
* ``topic_authorized_operations``: KIP-430's bits (:func:`strom.broker.authz.authorized_operations`:
  every operation a topic supports without an authorizer, as Kafka answers).

The services used (topics, the metadata cache, the config) are read in :func:`handle` only.

Authorization: DESCRIBE on each topic: a named one is TOPIC_AUTHORIZATION_FAILED whether it exists
or not, a listed one left out; each topic answered carries KIP-430's authorized operations.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from strom.broker import authz, dispatch
from strom.broker.context import RequestContext
from strom.metadata.topics import TopicInfo, validate_topic_name
from strom.protocol.errors import ErrorCode, KafkaError

API_KEY = 75
log = logging.getLogger(__name__)
PARTITION_LIMIT_CONFIG = "max.request.partition.size.limit"
DEFAULT_PARTITION_LIMIT = 2000  # Kafka's default of that config
NULL_ID = uuid.UUID(int=0)


def _partition(ctx: RequestContext, cache: Any, info: TopicInfo, index: int) -> Any:
    state = cache.partition(info.name, index)
    if state is None:  # not elected yet
        return ctx.make("DescribeTopicPartitionsResponsePartition",
                        error_code=ErrorCode.leader_not_available, partition_index=index,
                        leader_id=-1, leader_epoch=-1,
                        replica_nodes=tuple(info.replicas.get(index, ())),
                        eligible_leader_replicas=(), last_known_elr=())  # fmt: skip
    return ctx.make(
        "DescribeTopicPartitionsResponsePartition",
        error_code=ErrorCode.none if state.leader >= 0 else ErrorCode.leader_not_available,
        partition_index=index, leader_id=state.leader, leader_epoch=state.leader_epoch,
        replica_nodes=tuple(state.replicas), isr_nodes=tuple(state.isr),
        offline_replicas=tuple(state.offline), eligible_leader_replicas=(), last_known_elr=(),
    )  # fmt: skip


def _topic(ctx: RequestContext, info: TopicInfo, partitions: tuple[Any, ...]) -> Any:
    return ctx.make("DescribeTopicPartitionsResponseTopic", error_code=ErrorCode.none,
                    name=info.name, topic_id=info.topic_id or NULL_ID,
                    is_internal=info.is_internal, partitions=partitions,
                    topic_authorized_operations=authz.authorized_operations(
                        ctx, authz.TOPIC, info.name))  # fmt: skip


def _missing(ctx: RequestContext, name: str, code: ErrorCode) -> Any:
    return ctx.make("DescribeTopicPartitionsResponseTopic", error_code=code, name=name,
                    topic_id=NULL_ID, is_internal=False, partitions=())  # fmt: skip


def _unknown_code(name: str) -> ErrorCode:
    try:
        validate_topic_name(name)
    except KafkaError as exc:
        return exc.error_code
    return ErrorCode.unknown_topic_or_partition


@dispatch.handler(API_KEY, 0, 0)
async def handle(ctx: RequestContext, request: Any) -> Any:
    topics, cache = ctx.topics, ctx.replicas.cache
    configured = ctx.config.get(PARTITION_LIMIT_CONFIG)
    limit = int(configured) if configured else DEFAULT_PARTITION_LIMIT
    cursor = request.cursor
    start_topic = cursor.topic_name if cursor is not None else ""
    everything = not request.topics
    if everything:
        names = sorted(info.name for info in topics if info.name >= start_topic)
    else:
        names = sorted({str(t.name) for t in request.topics if str(t.name) >= start_topic})
        if cursor is not None and cursor.topic_name not in names:
            return _refused(ctx, request, "DescribeTopicPartitionsRequest topic list should "
                            f"contain the cursor topic: {cursor.topic_name}")  # fmt: skip
    if cursor is not None and cursor.partition_index < 0:
        return _refused(ctx, request, "DescribeTopicPartitionsRequest cursor partition must be "
                        f"valid: {cursor.partition_index}")  # fmt: skip
    remaining = max(min(limit, int(request.response_partition_limit)), 1)
    answered: list[Any] = []
    next_cursor = None
    for name in names:
        if remaining == 0:  # the previous topic filled the page exactly
            next_cursor = ctx.make("Cursor", topic_name=name, partition_index=0)
            break
        if not authz.authorize(ctx, authz.DESCRIBE, authz.TOPIC, name):
            if not everything:  # named: refused whether it exists or not; listed: left out
                answered.append(_missing(ctx, name, ErrorCode.topic_authorization_failed))
            continue
        info = topics.get(name)
        if info is None:
            if not everything:
                answered.append(_missing(ctx, name, _unknown_code(name)))
            continue
        first = cursor.partition_index if cursor is not None and name == start_topic else 0
        count = len(info.replicas)
        upper = min(count, first + remaining)
        answered.append(_topic(ctx, info, tuple(_partition(ctx, cache, info, i)
                                                for i in range(first, upper))))  # fmt: skip
        if upper < count:
            next_cursor = ctx.make("Cursor", topic_name=name, partition_index=upper)
            break
        remaining -= max(upper - first, 0)
    return ctx.respond(throttle_time=0, topics=tuple(answered), next_cursor=next_cursor)


def _refused(ctx: RequestContext, request: Any, message: str) -> Any:
    """Kafka's error response: every topic asked, with the error (the message is logged
    only: the response has no field for it)."""
    log.info("DescribeTopicPartitions refused: %s", message)
    return ctx.respond(throttle_time=0, topics=tuple(
        _missing(ctx, str(t.name), ErrorCode.invalid_request) for t in request.topics),
        next_cursor=None)  # fmt: skip
