"""Metadata (key 3): brokers, controller, cluster id, and topics with their partitions.

Asked for unknown topics, the broker creates them when the client allows it and
``auto.create.topics.enable`` is true (with ``num.partitions``); names Kafka would refuse get
INVALID_TOPIC_EXCEPTION, and unknown ones otherwise UNKNOWN_TOPIC_OR_PARTITION. Every
partition's leader, leader epoch, replicas, ISR and offline replicas, the live brokers and the
controller come from the metadata cache (:mod:`strom.replication.metadata_cache`, filled by the
controller's UpdateMetadata or, on a single node, by itself); a partition the cache does not
know yet is LEADER_NOT_AVAILABLE (the controller is still electing its leader).
v0 has no null topic list: there an empty list asks for every topic, as in Kafka.

A cluster member that has not yet had the controller's first UpdateMetadata (it has just
started: the controller reaches it once its listener is up) holds the answer until it has, up
to :data:`FIRST_UPDATE_WAIT_S` (:func:`cluster_view`): an answer naming no controller makes
librdkafka wait for one without asking again, so its admin requests never complete.

Caching (a 10,000-partition topic took ~100 ms to build and encode per request, all on the
event loop): each topic's entry is built once per response version and reused while the
topic's :class:`TopicInfo` is the same object with the same partition count (partitions are
only ever added in place, by CreatePartitions). Anything else that changes what an entry says
(replicas) must give the topic a new ``TopicInfo`` or join the key checked in
:func:`topic_metadata`; leaders, ISR and epochs are covered by the metadata cache's
``version``, part of that key. The encoded body is reused
too while the same topic entries (by identity) are answered.

Authorization: an all-topics answer lists only the topics the principal may DESCRIBE; a named one
it may not DESCRIBE is TOPIC_AUTHORIZATION_FAILED whether it exists or not (by id: without its
name); auto-creation needs CREATE on the CLUSTER or the topic, else TOPIC_AUTHORIZATION_FAILED.
KIP-430's authorized operations (v8+) when asked for.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from typing import Any

from strom.broker import authz, dispatch
from strom.broker.context import RequestContext
from strom.broker.metadata_answers import MetadataAnswers
from strom.metadata.topics import TopicInfo, validate_topic_name
from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.hot_path import EncodedBody
from strom.protocol.messages import encode_body

API_KEY = 3
AUTHORIZED_OPERATIONS_UNKNOWN = -(2**31)
FIRST_UPDATE_WAIT_S = 10.0  # the controller's channel retries within a second of our listener
log = logging.getLogger(__name__)


async def cluster_view(ctx: RequestContext) -> None:
    """In cluster mode, wait (bounded) until the metadata cache has the controller's first
    UpdateMetadata; a single node fills its cache itself before it listens."""
    cache = ctx.replicas.cache
    if cache.filled or not ctx.config.get("zookeeper.connect"):
        return
    if not await cache.wait_filled(FIRST_UPDATE_WAIT_S):
        log.warning("no UpdateMetadata from a controller within %gs: answering without one",
                    FIRST_UPDATE_WAIT_S)  # fmt: skip


async def auto_create(ctx: RequestContext, name: str) -> TopicInfo:
    """Create ``name`` with the broker's defaults (Metadata / FindCoordinator auto-creation);
    the file work runs off the event loop (:mod:`strom.broker.topic_lifecycle`)."""
    config = ctx.config
    return await ctx.topics.create(
        name,
        config.get_int("num.partitions"),
        config.get_int("default.replication.factor"),
        {},
    )


def topic_metadata(ctx: RequestContext, info: TopicInfo) -> Any:
    """The topic's entry for this request's version (cached, see the module docstring)."""
    topics = ctx.services.metadata_answers.topics
    key = (ctx.api_version, info.name, ctx.client.listener)
    cached = topics.get(key)
    version = ctx.replicas.cache.version
    if (cached is not None and cached[0] is info and cached[1] is info.replicas
            and cached[2] == len(info.replicas) and cached[3] == version):  # fmt: skip
        return cached[4]
    entry = _build_topic(ctx, info)
    if len(topics) >= MetadataAnswers.MAX_TOPICS:  # bounds what deleted topics leave behind
        topics.clear()
    topics[key] = (info, info.replicas, len(info.replicas), version, entry)
    return entry


def _leader_error(ctx: RequestContext, leader: int) -> ErrorCode:
    """Kafka's error for a partition led by ``leader`` as this request's listener sees it:
    LEADER_NOT_AVAILABLE while it has no leader; when the leader has no endpoint on the
    client's listener (a cluster whose brokers' listeners differ), LISTENER_NOT_FOUND from v6
    on (LEADER_NOT_AVAILABLE before); either way no leader is named: the client could not
    reach it.
    A leader the cache does not list as live keeps its id (the controller's next update
    settles it)."""
    if leader < 0:
        return ErrorCode.leader_not_available
    broker = ctx.replicas.cache.brokers.get(leader)
    if broker is not None and broker.on(ctx.client.listener) is None:
        return (ErrorCode.listener_not_found if ctx.api_version >= 6
                else ErrorCode.leader_not_available)  # fmt: skip
    return ErrorCode.none


def _build_topic(ctx: RequestContext, info: TopicInfo) -> Any:
    cache = ctx.replicas.cache
    partitions = []
    for index, replicas in sorted(info.replicas.items()):
        state = cache.partition(info.name, index)
        if state is None:
            partitions.append(ctx.make(
                "MetadataResponsePartition", error_code=ErrorCode.leader_not_available,
                partition_index=index, leader_id=-1, leader_epoch=-1,
                replica_nodes=tuple(replicas), isr_nodes=(), offline_replicas=(),
            ))  # fmt: skip
            continue
        error = _leader_error(ctx, state.leader)
        partitions.append(ctx.make(
            "MetadataResponsePartition", error_code=error, partition_index=index,
            leader_id=state.leader if error == ErrorCode.none else -1,
            leader_epoch=state.leader_epoch,
            replica_nodes=state.replicas, isr_nodes=state.isr, offline_replicas=state.offline,
        ))  # fmt: skip
    return ctx.make(
        "MetadataResponseTopic",
        error_code=0,
        name=info.name,
        topic_id=info.topic_id,
        is_internal=info.is_internal,
        partitions=tuple(partitions),
        topic_authorized_operations=AUTHORIZED_OPERATIONS_UNKNOWN,
    )


def _error_topic(ctx: RequestContext, name: str | None, topic_id: uuid.UUID | None,
                 code: ErrorCode) -> Any:  # fmt: skip
    return ctx.make(
        "MetadataResponseTopic",
        error_code=code,
        name=name,
        topic_id=topic_id or uuid.UUID(int=0),
        is_internal=False,
        partitions=(),
        topic_authorized_operations=AUTHORIZED_OPERATIONS_UNKNOWN,
    )


@dispatch.handler(API_KEY, 0, 13)
async def handle(ctx: RequestContext, request: Any) -> Any:
    await cluster_view(ctx)
    known = ctx.topics
    topics: list[Any] = []
    # "All topics" is a null list from v1 on; v0 has no null, there an empty list means all.
    secured = ctx.services.authorizer is not None
    if request.topics is None or (ctx.api_version == 0 and not request.topics):
        topics = [topic_metadata(ctx, info) for info in known
                  if not secured or authz.authorize(ctx, authz.DESCRIBE, authz.TOPIC, info.name)]  # fmt: skip
    else:
        if ctx.api_version < 12 and any(t.name is None for t in request.topics):
            # v10-11 have a topic id field but Kafka looks topics up by id only from v12
            raise KafkaError(
                ErrorCode.invalid_request,
                f"topic name can not be null for version {ctx.api_version}",
            )
        allow = ctx.api_version < 4 or bool(getattr(request, "allow_auto_topic_creation", True))
        allow = allow and ctx.config.get_bool("auto.create.topics.enable")
        for wanted in request.topics:
            name = wanted.name
            topic_id = getattr(wanted, "topic_id", None)
            # from v12, by id whenever the id is set (Kafka's rule): Java's admin client sends
            # the name as "" rather than null with it. v10-11 carry the field, but Kafka looks
            # topics up by name there (and their answer's name is not nullable)
            if ctx.api_version >= 12 and topic_id is not None and topic_id.int != 0:
                info = known.by_id(topic_id)
                if info is not None and secured and not authz.authorize(
                        ctx, authz.DESCRIBE, authz.TOPIC, info.name):  # fmt: skip
                    # the name is not revealed (Kafka's rule for requests by id)
                    topics.append(_error_topic(ctx, None, topic_id,
                                               ErrorCode.topic_authorization_failed))  # fmt: skip
                    continue
                topics.append(
                    topic_metadata(ctx, info)
                    if info
                    else _error_topic(ctx, None, topic_id, ErrorCode.unknown_topic_id)
                )
                continue
            if secured and name and not authz.authorize(ctx, authz.DESCRIBE, authz.TOPIC, name):
                # whether it exists or not: existence is not revealed
                topics.append(_error_topic(ctx, name, None, ErrorCode.topic_authorization_failed))
                continue
            info = known.get(name) if name else None
            if info is None:
                try:
                    validate_topic_name(name)
                except KafkaError as exc:
                    topics.append(_error_topic(ctx, name, None, exc.error_code))
                    continue
                if not allow:
                    topics.append(
                        _error_topic(ctx, name, None, ErrorCode.unknown_topic_or_partition)
                    )
                    continue
                if secured and not (authz.authorize_cluster(ctx, authz.CREATE) or authz.authorize(
                        ctx, authz.CREATE, authz.TOPIC, str(name))):  # fmt: skip
                    topics.append(_error_topic(ctx, name, None, ErrorCode.topic_authorization_failed))
                    continue
                if known.busy(str(name)):  # another request is creating it
                    topics.append(_error_topic(ctx, name, None, ErrorCode.leader_not_available))
                    continue
                try:
                    info = await auto_create(ctx, str(name))
                except KafkaError as exc:
                    topics.append(_error_topic(ctx, name, None, exc.error_code))
                    continue
            topics.append(topic_metadata(ctx, info))
    if getattr(request, "include_topic_authorized_operations", False):  # KIP-430, v8+
        topics = [_with_operations(ctx, t) for t in topics]
    cluster_ops = authz.authorized_operations(
        ctx, authz.CLUSTER, authz.CLUSTER_NAME,
        bool(getattr(request, "include_cluster_authorized_operations", False)))  # fmt: skip
    return _respond(ctx, topics, cluster_ops)


def _with_operations(ctx: RequestContext, entry: Any) -> Any:
    """A topic entry with KIP-430's authorized operations (a copy: entries are cached)."""
    if entry.error_code != ErrorCode.none or entry.name is None:
        return entry
    return dataclasses.replace(entry, topic_authorized_operations=authz.authorized_operations(
        ctx, authz.TOPIC, entry.name))  # fmt: skip


def _respond(ctx: RequestContext, topics: list[Any],
             cluster_ops: int = AUTHORIZED_OPERATIONS_UNKNOWN) -> EncodedBody:  # fmt: skip
    """The encoded body; reused while the same topic entries are answered and the metadata
    cache (brokers, controller) has not changed."""
    cache = ctx.services.metadata_answers
    cluster = ctx.replicas.cache
    listener = ctx.client.listener
    key = (ctx.api_version, cluster.version, listener, cluster_ops, *map(id, topics))
    cached = cache.bodies.get(key)
    if cached is not None:
        return cached[1]
    response = ctx.respond(
        throttle_time=0,
        brokers=tuple(ctx.make("MetadataResponseBroker", node_id=b.node_id, host=b.host,
                               port=b.port, rack=b.rack)
                      for b in cluster.brokers_on(listener)),
        cluster_id=ctx.node.cluster_id,
        controller_id=cluster.controller_id,
        topics=tuple(topics),
        cluster_authorized_operations=cluster_ops,
        error_code=0,  # v13 (KIP-1102): a top-level error, e.g. REBOOTSTRAP_REQUIRED
    )
    body = EncodedBody(encode_body(response), type(response).__flexible__)
    if all(t.error_code == ErrorCode.none for t in topics):  # error entries are built anew
        if len(cache.bodies) >= cache.MAX_BODIES:
            cache.bodies.pop(next(iter(cache.bodies)))
        cache.bodies[key] = (tuple(topics), body)  # holds the entries: their ids stay unique
    return body
