"""StopReplica (key 5, v4): stop leading or following partitions, and maybe delete them.

Served only at v4. Fenced like LeaderAndIsr (STALE_CONTROLLER_EPOCH, STALE_BROKER_EPOCH); a
partition whose state carries an older leader epoch than this broker's is
FENCED_LEADER_EPOCH (-1 and -2, "deletion", are not checked). Stopping ends fetching and
fails waiting acks=all requests with NOT_LEADER_OR_FOLLOWER; ``delete_partition`` removes
the log (files removed off the event loop). Refused while this broker leads itself.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from strom.broker import dispatch
from strom.broker.context import RequestContext
from strom.broker.local_leadership import local_controller_active
from strom.protocol.errors import ErrorCode
from strom.storage.log_manager import remove_log

API_KEY = 5
log = logging.getLogger(__name__)


@dispatch.handler(API_KEY, 4, 4)
async def handle(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    if local_controller_active(broker):
        return ctx.respond(error_code=ErrorCode.stale_controller_epoch, partition_errors=())
    replicas = broker.replicas
    code = replicas.fence(int(request.controller_epoch), int(request.broker_epoch),
                          int(getattr(broker, "broker_epoch", -1)))  # fmt: skip
    if code != ErrorCode.none:
        return ctx.respond(error_code=code, partition_errors=())
    errors = []
    for topic in request.topic_states:
        name = str(topic.topic_name)
        for p in topic.partition_states:
            err = replicas.stop_replica(name, int(p.partition_index), int(p.leader_epoch),
                                        bool(p.delete_partition))  # fmt: skip
            errors.append(ctx.make("StopReplicaPartitionError", topic_name=name,
                                   partition_index=p.partition_index, error_code=err))  # fmt: skip
    doomed = replicas.take_deleted()
    if doomed:
        loop = asyncio.get_running_loop()

        def remove() -> None:
            for x in doomed:
                remove_log(x)

        await loop.run_in_executor(None, remove)
        log.info("deleted %d stopped replicas", len(doomed))
    return ctx.respond(error_code=ErrorCode.none, partition_errors=tuple(errors))
