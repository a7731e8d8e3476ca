"""ReadShareGroupState (key 84, v0): a share-partition's state, read by its partition's leader.

Between brokers. The leader epoch read with is kept by the share coordinator: a later write
or read from an older leader is FENCED_LEADER_EPOCH. An uninitialized share-partition reads as
start offset -1, state epoch 0, no batches. Rules:
:meth:`strom.broker.share.coordinator.ShareCoordinator.read`.

Authorization: CLUSTER_ACTION on the CLUSTER, else the whole request is CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import Any

from strom.broker import authz, dispatch
from strom.broker.context import RequestContext
from strom.broker.share.coordinator import ReadResult
from strom.protocol.errors import KafkaError

API_KEY = 84


@dispatch.handler(API_KEY, 0, 0)
async def handle(ctx: RequestContext, request: Any) -> Any:
    authz.require_cluster(ctx, authz.CLUSTER_ACTION)
    group = str(request.group_id)
    results = []
    for topic in request.topics:
        parts = []
        for p in topic.partitions:
            try:
                r = await ctx.shares.state.read((group, topic.topic_id, int(p.partition)),
                                                int(p.leader_epoch))  # fmt: skip
            except KafkaError as exc:
                r = ReadResult(exc.error_code, str(exc))
            if r.error:
                ctx.metrics.request_error(API_KEY, r.error)
            parts.append(ctx.make(
                "PartitionResult", partition=p.partition, error_code=r.error,
                error_message=r.message, state_epoch=r.state_epoch, start_offset=r.start_offset,
                state_batches=tuple(ctx.make("StateBatch", first_offset=b.first, last_offset=b.last,
                                             delivery_state=b.state, delivery_count=b.deliveries)
                                    for b in r.batches)))  # fmt: skip
        results.append(ctx.make("ReadStateResult", topic_id=topic.topic_id, partitions=tuple(parts)))
    return ctx.respond(results=tuple(results))
