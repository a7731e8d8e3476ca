"""DescribeCluster (key 60): the brokers, the controller and the cluster id.

Only broker endpoints (endpoint_type 1) exist; asking for controller endpoints (2) is
UNSUPPORTED_ENDPOINT_TYPE. The live brokers (with rack) and the controller come from the
metadata cache (:mod:`strom.replication.metadata_cache`), once a cluster member has it
(:func:`strom.broker.handlers.metadata.cluster_view`).

Authorization: none needed (as in Kafka); KIP-430's cluster authorized operations when asked for.
"""

from __future__ import annotations

from typing import Any

from strom.broker import authz, dispatch
from strom.broker.context import RequestContext
from strom.broker.handlers.metadata import cluster_view
from strom.protocol.errors import ErrorCode

API_KEY = 60
BROKERS_ENDPOINT = 1
AUTHORIZED_OPERATIONS_UNKNOWN = -(2**31)


@dispatch.handler(API_KEY, 0, 2)
async def handle(ctx: RequestContext, request: Any) -> Any:
    endpoint_type = int(getattr(request, "endpoint_type", BROKERS_ENDPOINT))
    if endpoint_type != BROKERS_ENDPOINT:
        return ctx.respond(
            throttle_time=0,
            error_code=ErrorCode.unsupported_endpoint_type,
            error_message=f"endpoint type {endpoint_type} is not supported",
            endpoint_type=endpoint_type,
            cluster_id=ctx.node.cluster_id,
            controller_id=-1,
            brokers=(),
            cluster_authorized_operations=AUTHORIZED_OPERATIONS_UNKNOWN,
        )
    await cluster_view(ctx)
    cache = ctx.replicas.cache
    brokers = cache.brokers_on(ctx.client.listener)
    return ctx.respond(
        throttle_time=0,
        error_code=ErrorCode.none,
        error_message=None,
        endpoint_type=BROKERS_ENDPOINT,
        cluster_id=ctx.node.cluster_id,
        controller_id=cache.controller_id,
        brokers=tuple(
            ctx.make(
                "DescribeClusterBroker", broker_id=b.node_id, host=b.host, port=b.port,
                rack=b.rack, is_fenced=False,  # v2: live brokers are not fenced
            ) for b in brokers
        ),
        cluster_authorized_operations=authz.authorized_operations(
            ctx, authz.CLUSTER, authz.CLUSTER_NAME,
            bool(getattr(request, "include_cluster_authorized_operations", False))),
    )
