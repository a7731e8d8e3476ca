"""DeleteShareGroupState (key 86, v0): remove share-partitions' state (tombstones).

Between brokers: the group coordinator deleting a share group, or its offsets for some topics
(DeleteShareGroupOffsets). Deleting state that does not exist succeeds.

Authorization: CLUSTER_ACTION on the CLUSTER, else the whole request is CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import Any

from strom.broker import authz, dispatch
from strom.broker.context import RequestContext
from strom.protocol.errors import KafkaError

API_KEY = 86


@dispatch.handler(API_KEY, 0, 0)
async def handle(ctx: RequestContext, request: Any) -> Any:
    authz.require_cluster(ctx, authz.CLUSTER_ACTION)
    group = str(request.group_id)
    results = []
    for topic in request.topics:
        parts = []
        for p in topic.partitions:
            message = None
            try:
                code = await ctx.shares.state.delete((group, topic.topic_id, int(p.partition)))
            except KafkaError as exc:
                code, message = exc.error_code, str(exc)
            if code:
                ctx.metrics.request_error(API_KEY, code)
            parts.append(ctx.make("PartitionResult", partition=p.partition, error_code=code,
                                  error_message=message))  # fmt: skip
        results.append(ctx.make("DeleteStateResult", topic_id=topic.topic_id, partitions=tuple(parts)))
    return ctx.respond(results=tuple(results))
