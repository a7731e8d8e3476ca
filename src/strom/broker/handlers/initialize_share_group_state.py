"""InitializeShareGroupState (key 83, v0): create or reset share-partitions' state.

Between brokers: the group coordinator asks the share coordinator (the leader of the key's
``__share_group_state`` partition) to initialize the state of newly assigned share-partitions,
or to reset it at a newer state epoch (AlterShareGroupOffsets). Rules:
:meth:`strom.broker.share.coordinator.ShareCoordinator.initialize`; a key this broker does not
coordinate is NOT_COORDINATOR.

Authorization: CLUSTER_ACTION on the CLUSTER, else the whole request is CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import Any

from strom.broker import authz, dispatch
from strom.broker.context import RequestContext
from strom.protocol.errors import KafkaError

API_KEY = 83


@dispatch.handler(API_KEY, 0, 0)
async def handle(ctx: RequestContext, request: Any) -> Any:
    authz.require_cluster(ctx, authz.CLUSTER_ACTION)
    group = str(request.group_id)
    results = []
    for topic in request.topics:
        parts = []
        for p in topic.partitions:
            try:
                code, message = await ctx.shares.state.initialize(
                    (group, topic.topic_id, int(p.partition)), int(p.state_epoch),
                    int(p.start_offset))  # fmt: skip
            except KafkaError as exc:
                code, message = exc.error_code, str(exc)
            if code:
                ctx.metrics.request_error(API_KEY, code)
            parts.append(ctx.make("PartitionResult", partition=p.partition, error_code=code,
                                  error_message=message))  # fmt: skip
        results.append(ctx.make("InitializeStateResult", topic_id=topic.topic_id,
                                partitions=tuple(parts)))  # fmt: skip
    return ctx.respond(results=tuple(results))
