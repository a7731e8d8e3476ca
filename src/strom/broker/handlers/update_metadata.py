"""UpdateMetadata (key 6, v8): the controller's view of the cluster for the metadata cache.

Served only at v8. The request becomes an :class:`~strom.replication.commands.UpdateMetadata`
command (:meth:`~strom.replication.replica_manager.ReplicaManager.apply_update_metadata`):
fenced like LeaderAndIsr (STALE_CONTROLLER_EPOCH, STALE_BROKER_EPOCH), then applied to the
metadata cache (live brokers, controller id, partition states); replica fetchers are woken,
since a leader's address may be new. Refused while this broker leads itself (single node,
:mod:`strom.replication.local_leadership`).

Authorization: CLUSTER_ACTION on the CLUSTER, else the whole request is CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import Any

from strom.broker import authz, dispatch
from strom.broker.context import RequestContext
from strom.protocol.errors import ErrorCode
from strom.replication.commands import PartitionMetadata, UpdateMetadata
from strom.replication.metadata_cache import BrokerInfo, PartitionInfo

API_KEY = 6


def command(request: Any) -> UpdateMetadata:
    """The request as the replica manager's command (a broker's first endpoint is its
    address for peers: brokers register the inter-broker listener first; every endpoint is
    kept by listener name for clients)."""
    brokers = []
    for b in request.live_brokers:
        endpoint = b.endpoints[0] if b.endpoints else None
        listeners = tuple((str(e.listener).upper(), str(e.host), int(e.port))
                          for e in b.endpoints)  # fmt: skip
        brokers.append(BrokerInfo(int(b.id_), endpoint.host if endpoint else "",
                                  int(endpoint.port) if endpoint else -1, b.rack,
                                  listeners))  # fmt: skip
    return UpdateMetadata(int(request.controller_id), int(request.controller_epoch),
                          int(request.broker_epoch), tuple(brokers), tuple(
        PartitionMetadata(str(topic.topic_name), int(p.partition_index), PartitionInfo(
            int(p.leader), int(p.leader_epoch), tuple(map(int, p.replicas)),
            tuple(map(int, p.isr)), int(p.zk_version), tuple(map(int, p.offline_replicas))))
        for topic in request.topic_states for p in topic.partition_states))  # fmt: skip


@dispatch.handler(API_KEY, 8, 8)
async def handle(ctx: RequestContext, request: Any) -> Any:
    authz.require_cluster(ctx, authz.CLUSTER_ACTION)
    replicas = ctx.replicas
    if replicas.led_locally:
        return ctx.respond(error_code=ErrorCode.stale_controller_epoch)
    return ctx.respond(error_code=replicas.apply_update_metadata(command(request)))
