"""StopReplica (key 5, v4): stop leading or following partitions, and maybe delete them.

Served only at v4. The request becomes a :class:`~strom.replication.commands.StopReplicas`
command (:meth:`~strom.replication.replica_manager.ReplicaManager.apply_stop_replicas`):
fenced like LeaderAndIsr (STALE_CONTROLLER_EPOCH, STALE_BROKER_EPOCH); a partition whose
state carries an older leader epoch than this broker's is FENCED_LEADER_EPOCH (-1 and -2,
"deletion", are not checked). Stopping ends fetching and fails waiting acks=all requests with
NOT_LEADER_OR_FOLLOWER; ``delete_partition`` removes the log (files removed off the event
loop). Refused while this broker leads itself.

Authorization: CLUSTER_ACTION on the CLUSTER, else the whole request is CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from strom.broker import authz, dispatch
from strom.broker.context import RequestContext
from strom.protocol.errors import ErrorCode
from strom.replication.commands import StopPartition, StopReplicas
from strom.storage.log_manager import remove_log

API_KEY = 5
log = logging.getLogger(__name__)


def command(request: Any) -> StopReplicas:
    return StopReplicas(int(request.controller_id), int(request.controller_epoch),
                        int(request.broker_epoch), tuple(
        StopPartition(str(topic.topic_name), int(p.partition_index), int(p.leader_epoch),
                      bool(p.delete_partition))
        for topic in request.topic_states for p in topic.partition_states))  # fmt: skip


@dispatch.handler(API_KEY, 4, 4)
async def handle(ctx: RequestContext, request: Any) -> Any:
    authz.require_cluster(ctx, authz.CLUSTER_ACTION)
    replicas = ctx.replicas
    if replicas.led_locally:
        return ctx.respond(error_code=ErrorCode.stale_controller_epoch, partition_errors=())
    code, errors = replicas.apply_stop_replicas(command(request))
    if code != ErrorCode.none:
        return ctx.respond(error_code=code, partition_errors=())
    doomed = replicas.take_deleted()
    if doomed:
        def remove() -> None:
            for x in doomed:
                remove_log(x)

        await asyncio.get_running_loop().run_in_executor(None, remove)
        log.info("deleted %d stopped replicas", len(doomed))
    return ctx.respond(error_code=ErrorCode.none, partition_errors=tuple(
        ctx.make("StopReplicaPartitionError", topic_name=topic.topic_name,
                 partition_index=p.partition_index,
                 error_code=errors[(str(topic.topic_name), int(p.partition_index))])
        for topic in request.topic_states for p in topic.partition_states))  # fmt: skip
