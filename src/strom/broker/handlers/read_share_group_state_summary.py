"""ReadShareGroupStateSummary (key 87, v0–1): a share-partition's start offset and epochs.

Between brokers: the group coordinator describing a share group's offsets
(DescribeShareGroupOffsets). v1 adds the delivery-complete count (KIP-1226's lag). Writes
nothing; an older leader epoch is FENCED_LEADER_EPOCH, -1 reads without the check.

Authorization: CLUSTER_ACTION on the CLUSTER, else the whole request is CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import Any

from strom.broker import authz, dispatch
from strom.broker.context import RequestContext
from strom.broker.share.coordinator import ReadResult
from strom.protocol.errors import KafkaError

API_KEY = 87


@dispatch.handler(API_KEY, 0, 1)
async def handle(ctx: RequestContext, request: Any) -> Any:
    authz.require_cluster(ctx, authz.CLUSTER_ACTION)
    group = str(request.group_id)
    results = []
    for topic in request.topics:
        parts = []
        for p in topic.partitions:
            try:
                r = await ctx.shares.state.summary((group, topic.topic_id, int(p.partition)),
                                                   int(p.leader_epoch))  # fmt: skip
            except KafkaError as exc:
                r = ReadResult(exc.error_code, str(exc))
            if r.error:
                ctx.metrics.request_error(API_KEY, r.error)
            parts.append(ctx.make("PartitionResult", partition=p.partition, error_code=r.error,
                                  error_message=r.message, state_epoch=r.state_epoch,
                                  leader_epoch=r.leader_epoch, start_offset=r.start_offset,
                                  delivery_complete_count=r.delivery_complete_count))  # fmt: skip
        results.append(ctx.make("ReadStateSummaryResult", topic_id=topic.topic_id,
                                partitions=tuple(parts)))  # fmt: skip
    return ctx.respond(results=tuple(results))
