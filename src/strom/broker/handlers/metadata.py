"""Metadata (key 3): brokers, controller, cluster id, and topics with their partitions.

Asked for unknown topics, the broker creates them when the client allows it and
``auto.create.topics.enable`` is true (with ``num.partitions``); names Kafka would refuse get
INVALID_TOPIC_EXCEPTION, and unknown ones otherwise UNKNOWN_TOPIC_OR_PARTITION. Every
partition's leader epoch is the single node's (:mod:`strom.broker.leader_epochs`).
v0 has no null topic list: there an empty list asks for every topic, as in Kafka.

Caching (a 10,000-partition topic took ~100 ms to build and encode per request, all on the
event loop): each topic's entry is built once per response version and reused while the
topic's :class:`TopicInfo` is the same object with the same partition count (partitions are
only ever added in place, by CreatePartitions). Anything else that changes what an entry says
(replicas, and with replication leaders, ISR and epochs) must give the topic a new
``TopicInfo`` or join the key checked in :func:`topic_metadata`. The encoded body is reused
too while the same topic entries (by identity) are answered.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from strom.broker import dispatch
from strom.broker.context import RequestContext
from strom.broker.leader_epochs import LEADER_EPOCH
from strom.metadata.topics import TopicInfo, validate_topic_name
from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.hot_path import EncodedBody
from strom.protocol.messages import encode_body

API_KEY = 3
AUTHORIZED_OPERATIONS_UNKNOWN = -(2**31)
log = logging.getLogger(__name__)


async def auto_create(ctx: RequestContext, name: str) -> TopicInfo:
    """Create ``name`` with the broker's defaults (Metadata / FindCoordinator auto-creation);
    the file work runs off the event loop (:mod:`strom.broker.topic_lifecycle`)."""
    config = ctx.broker.config
    return await ctx.broker.create_topic(
        name,
        config.get_int("num.partitions"),
        config.get_int("default.replication.factor"),
        {},
    )


class _Cache:
    """Per broker: topic entries and encoded bodies, see the module docstring."""

    MAX_BODIES = 64
    MAX_TOPICS = 10_000

    def __init__(self) -> None:
        self.topics: dict[tuple[int, str], tuple[TopicInfo, Any, int, Any]] = {}
        self.bodies: dict[tuple[Any, ...], tuple[tuple[Any, ...], EncodedBody]] = {}


def _cache(ctx: RequestContext) -> _Cache:
    cache = ctx.broker.extensions.get("metadata.cache")
    if cache is None:
        cache = ctx.broker.extensions["metadata.cache"] = _Cache()
    return cache


def topic_metadata(ctx: RequestContext, info: TopicInfo) -> Any:
    """The topic's entry for this request's version (cached, see the module docstring)."""
    topics = _cache(ctx).topics
    key = (ctx.api_version, info.name)
    cached = topics.get(key)
    if (cached is not None and cached[0] is info and cached[1] is info.replicas
            and cached[2] == len(info.replicas)):  # fmt: skip
        return cached[3]
    entry = _build_topic(ctx, info)
    if len(topics) >= _Cache.MAX_TOPICS:  # bounds what deleted topics leave behind
        topics.clear()
    topics[key] = (info, info.replicas, len(info.replicas), entry)
    return entry


def _build_topic(ctx: RequestContext, info: TopicInfo) -> Any:
    node = ctx.broker.node_id
    partitions = []
    for index, replicas in sorted(info.replicas.items()):
        leader = replicas[0] if replicas else -1
        partitions.append(
            ctx.make(
                "MetadataResponsePartition",
                error_code=0,
                partition_index=index,
                leader_id=leader,
                leader_epoch=LEADER_EPOCH,
                replica_nodes=tuple(replicas),
                isr_nodes=tuple(r for r in replicas if r == node),
                offline_replicas=(),
            )
        )
    return ctx.make(
        "MetadataResponseTopic",
        error_code=0,
        name=info.name,
        topic_id=info.topic_id,
        is_internal=info.is_internal,
        partitions=tuple(partitions),
        topic_authorized_operations=AUTHORIZED_OPERATIONS_UNKNOWN,
    )


def _error_topic(ctx: RequestContext, name: str | None, topic_id: Any, code: ErrorCode) -> Any:
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
    broker = ctx.broker
    topics: list[Any] = []
    # "All topics" is a null list from v1 on; v0 has no null, there an empty list means all.
    if request.topics is None or (ctx.api_version == 0 and not request.topics):
        topics = [topic_metadata(ctx, info) for info in broker.topics]
    else:
        if ctx.api_version < 12 and any(t.name is None for t in request.topics):
            # v10-11 have a topic id field but Kafka looks topics up by id only from v12
            raise KafkaError(
                ErrorCode.invalid_request,
                f"topic name can not be null for version {ctx.api_version}",
            )
        allow = ctx.api_version < 4 or bool(getattr(request, "allow_auto_topic_creation", True))
        allow = allow and broker.config.get_bool("auto.create.topics.enable")
        for wanted in request.topics:
            name = wanted.name
            topic_id = getattr(wanted, "topic_id", None)
            if name is None and topic_id is not None and topic_id.int != 0:
                info = broker.topics.by_id(topic_id)
                topics.append(
                    topic_metadata(ctx, info)
                    if info
                    else _error_topic(ctx, None, topic_id, ErrorCode.unknown_topic_id)
                )
                continue
            info = broker.topics.get(name) if name else None
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
                if broker.lifecycle.busy(str(name)):  # another request is creating it
                    topics.append(_error_topic(ctx, name, None, ErrorCode.leader_not_available))
                    continue
                try:
                    info = await auto_create(ctx, str(name))
                except KafkaError as exc:
                    topics.append(_error_topic(ctx, name, None, exc.error_code))
                    continue
            topics.append(topic_metadata(ctx, info))
    return _respond(ctx, topics)


def _respond(ctx: RequestContext, topics: list[Any]) -> EncodedBody:
    """The encoded body; reused while the same topic entries are answered (the brokers,
    cluster id and controller of a running broker do not change)."""
    cache = _cache(ctx)
    key = (ctx.api_version, *map(id, topics))
    cached = cache.bodies.get(key)
    if cached is not None:
        return cached[1]
    broker = ctx.broker
    host, port = broker.advertised
    response = ctx.respond(
        throttle_time=0,
        brokers=(ctx.make("MetadataResponseBroker", node_id=broker.node_id, host=host, port=port, rack=None),),
        cluster_id=broker.cluster_id,
        controller_id=broker.node_id,
        topics=tuple(topics),
        cluster_authorized_operations=AUTHORIZED_OPERATIONS_UNKNOWN,
        error_code=0,  # v13 (KIP-1102): a top-level error, e.g. REBOOTSTRAP_REQUIRED
    )
    body = EncodedBody(encode_body(response), type(response).__flexible__)
    if all(t.error_code == ErrorCode.none for t in topics):  # error entries are built anew
        if len(cache.bodies) >= cache.MAX_BODIES:
            cache.bodies.pop(next(iter(cache.bodies)))
        cache.bodies[key] = (tuple(topics), body)  # holds the entries: their ids stay unique
    return body
