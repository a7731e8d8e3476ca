"""LeaderAndIsr (key 4, v7): the controller tells this broker what to lead and follow.

Served only at v7 (Kafka 3.x's last ZooKeeper-mode version; Kafka 4 has no such API). The
request becomes a :class:`~strom.replication.commands.LeaderAndIsr` command applied by the
replica manager (:meth:`~strom.replication.replica_manager.ReplicaManager.apply_leader_and_isr`).

It is refused first (STALE_BROKER_EPOCH) when this broker's registration is gone from the store
(:meth:`~strom.metadata.brokers.BrokerMembership.still_registered`, asked of the store itself):
a broker stopped past its session (SIGSTOP) reads, once resumed, requests the controller sent
before the session expired, ahead of noticing the expiry, and would otherwise lead partitions
the controller has given to others meanwhile (nemesis seed 1381750404: such a zombie leader
answered an idempotent producer's next batch with OUT_OF_ORDER_SEQUENCE_NUMBER, fatal for
librdkafka). The controller sends the current state once the broker has registered again.

Then it is fenced (a controller epoch lower than one already seen is STALE_CONTROLLER_EPOCH, a
broker epoch older than this broker's registration STALE_BROKER_EPOCH), then every partition
state applied: the log is created if this broker has none (Kafka creates replicas' logs here,
not at topic creation), a partition whose state carries an older leader epoch than known is
STALE_CONTROLLER_EPOCH, one that does not list this broker is UNKNOWN_TOPIC_OR_PARTITION.
While this broker leads itself (:mod:`strom.replication.local_leadership`, single node) remote
controllers are refused with STALE_CONTROLLER_EPOCH.

A topic the controller names but this broker's registry lacks is read from the store first
(its watch has not fired yet): writing it would overwrite its configs. Only one the store lacks
too (a test acting as the controller, on separate embedded stores) is registered here, with
the controller's id, so Produce, Fetch and Metadata find it.

Authorization: CLUSTER_ACTION on the CLUSTER, else the whole request is CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from typing import Any

from strom.broker import authz, dispatch
from strom.broker.context import RequestContext
from strom.metadata.topics import TopicRegistry
from strom.protocol.errors import ErrorCode
from strom.replication.commands import LeaderAndIsr, PartitionRole

API_KEY = 4
log = logging.getLogger(__name__)


def command(request: Any) -> LeaderAndIsr:
    """The request as the replica manager's command."""
    return LeaderAndIsr(int(request.controller_id), int(request.controller_epoch),
                        int(request.broker_epoch), tuple(
        PartitionRole(str(topic.topic_name), int(p.partition_index), int(p.leader),
                      int(p.leader_epoch), tuple(map(int, p.isr)), int(p.partition_epoch),
                      tuple(map(int, p.replicas)))
        for topic in request.topic_states for p in topic.partition_states))  # fmt: skip


async def register_topic(topics: TopicRegistry, name: str, topic_id: uuid.UUID | None,
                         replicas: Mapping[int, list[int]]) -> None:  # fmt: skip
    """Register a topic the store does not know (module doc); known topics are left as they
    are (the controller's store is their truth)."""
    info = topics.get(name)
    try:
        if info is None:
            await topics.create(name, replicas, {}, topic_id=topic_id)
        else:
            missing = {p: r for p, r in replicas.items() if p not in info.replicas}
            if missing:
                await topics.add_partitions(name, missing)
    except Exception as exc:  # a store shared with others may have it already
        log.info("topic %s not registered locally: %s", name, exc)


@dispatch.handler(API_KEY, 7, 7)
async def handle(ctx: RequestContext, request: Any) -> Any:
    authz.require_cluster(ctx, authz.CLUSTER_ACTION)
    replicas = ctx.replicas
    if replicas.led_locally:
        return ctx.respond(error_code=ErrorCode.stale_controller_epoch, topics=())
    if not await replicas.registration_alive(int(request.broker_epoch)):
        # sent to a registration whose session expired (this process was stopped past it):
        # the controller has moved on; it sends the current state after the new registration
        log.warning("LeaderAndIsr of controller %s (epoch %s) refused: meant for a registration "
                    "of this broker (epoch %s) that is gone", request.controller_id,
                    request.controller_epoch, request.broker_epoch)  # fmt: skip
        return ctx.respond(error_code=ErrorCode.stale_broker_epoch, topics=())
    topics = ctx.topics.registry
    for topic in request.topic_states:
        if await topics.load(str(topic.topic_name)) is None:
            await register_topic(topics, str(topic.topic_name), topic.topic_id,
                                 {int(p.partition_index): [int(r) for r in p.replicas]
                                  for p in topic.partition_states})  # fmt: skip
    code, errors = replicas.apply_leader_and_isr(command(request))
    if code != ErrorCode.none:
        return ctx.respond(error_code=code, topics=())
    return ctx.respond(error_code=code, topics=tuple(
        ctx.make("LeaderAndIsrTopicError", topic_id=topic.topic_id, partition_errors=tuple(
            ctx.make("LeaderAndIsrPartitionError", partition_index=p.partition_index,
                     error_code=errors[(str(topic.topic_name), int(p.partition_index))])
            for p in topic.partition_states))
        for topic in request.topic_states))  # fmt: skip
