"""LeaderAndIsr (key 4, v7): the controller tells this broker what to lead and follow.

Served only at v7 (Kafka 3.x's last ZooKeeper-mode version; Kafka 4 has no such API). The
request is fenced first (:meth:`ReplicaManager.fence`): a controller epoch lower than one
already seen is STALE_CONTROLLER_EPOCH, a broker epoch older than this broker's registration
(``broker.broker_epoch``, -1 until the ZooKeeper registration sets it) STALE_BROKER_EPOCH.
Then every partition state is applied (:meth:`ReplicaManager.become_leader_or_follower`):
the log is created if this broker has none (Kafka creates replicas' logs here, not at topic
creation), a partition whose state carries an older leader epoch than known is
STALE_CONTROLLER_EPOCH, one that does not list this broker is UNKNOWN_TOPIC_OR_PARTITION.
While this broker leads itself (:mod:`strom.broker.local_leadership`, single node) remote
controllers are refused with STALE_CONTROLLER_EPOCH.
"""

from __future__ import annotations

import logging
from typing import Any

from strom.broker import dispatch, long_lived
from strom.broker.context import RequestContext
from strom.broker.local_leadership import local_controller_active, register_topic
from strom.protocol.errors import ErrorCode

API_KEY = 4
log = logging.getLogger(__name__)


def apply(broker: Any, request: Any) -> tuple[ErrorCode, list[tuple[Any, list[tuple[int, ErrorCode]]]]]:
    """Apply a LeaderAndIsr request (also called locally by the single node's leadership):
    (top-level error, per topic (topic state, [(partition, error)]))."""
    replicas = broker.replicas
    code = replicas.fence(int(request.controller_epoch), int(request.broker_epoch),
                          int(getattr(broker, "broker_epoch", -1)))  # fmt: skip
    if code != ErrorCode.none:
        return code, []
    results = []
    count = sum(len(t.partition_states) for t in request.topic_states)
    hosted = broker.logs.count()
    with long_lived.bulk(count):  # logs made here for thousands of partitions: long_lived
        for topic in request.topic_states:
            name = str(topic.topic_name)
            info = broker.topics.get(name)
            overrides = dict(info.configs) if info is not None else {}
            errors = []
            for state in topic.partition_states:
                try:
                    err = replicas.become_leader_or_follower(int(request.controller_epoch),
                                                             name, state, overrides)  # fmt: skip
                except Exception:
                    log.exception("LeaderAndIsr of %s-%s failed", name, state.partition_index)
                    err = ErrorCode.kafka_storage_error
                errors.append((int(state.partition_index), err))
            results.append((topic, errors))
        long_lived.added(max(0, broker.logs.count() - hosted))
    if int(request.controller_id) != broker.node_id:  # the local leadership logs its own
        states = [s for t in request.topic_states for s in t.partition_states]
        leading = sum(1 for s in states if int(s.leader) == broker.node_id)
        failed = sum(1 for _t, errs in results for _p, e in errs if e != ErrorCode.none)
        log.info("LeaderAndIsr of controller %s (epoch %s): leading %d, following %d "
                 "partitions, %d refused", request.controller_id, request.controller_epoch,
                 leading, len(states) - leading, failed)  # fmt: skip
    return ErrorCode.none, results


@dispatch.handler(API_KEY, 7, 7)
async def handle(ctx: RequestContext, request: Any) -> Any:
    if local_controller_active(ctx.broker):
        return ctx.respond(error_code=ErrorCode.stale_controller_epoch, topics=())
    # A topic the controller names but this broker's registry lacks is read from the store
    # (its watch has not fired yet): writing it would overwrite its configs. Only one the store
    # lacks too (a test acting as the controller, on separate embedded stores) is registered.
    for topic in request.topic_states:
        if await ctx.broker.topics.load(str(topic.topic_name)) is None:
            await register_topic(ctx.broker, str(topic.topic_name), topic.topic_id,
                                 {int(p.partition_index): [int(r) for r in p.replicas]
                                  for p in topic.partition_states})  # fmt: skip
    code, results = apply(ctx.broker, request)
    topics = tuple(
        ctx.make("LeaderAndIsrTopicError", topic_id=topic.topic_id, partition_errors=tuple(
            ctx.make("LeaderAndIsrPartitionError", partition_index=p, error_code=err)
            for p, err in errors))
        for topic, errors in results
    )  # fmt: skip
    return ctx.respond(error_code=code, topics=topics)
