"""WriteShareGroupState (key 85, v0–1): a share-partition's leader persists its state.

Between brokers: the start offset, the state batches that changed (combined into the stored
state), and from v1 the delivery-complete count (KIP-1226). Written with acks=all before the
answer. Rules (fencing by leader and state epoch, uninitialized = INVALID_REQUEST):
:meth:`strom.broker.share.coordinator.ShareCoordinator.write`.

Authorization: CLUSTER_ACTION on the CLUSTER, else the whole request is CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import Any

from strom.broker import authz, dispatch
from strom.broker.context import RequestContext
from strom.broker.share.state import Batch
from strom.protocol.errors import KafkaError

API_KEY = 85


@dispatch.handler(API_KEY, 0, 1)
async def handle(ctx: RequestContext, request: Any) -> Any:
    authz.require_cluster(ctx, authz.CLUSTER_ACTION)
    group = str(request.group_id)
    results = []
    for topic in request.topics:
        parts = []
        for p in topic.partitions:
            batches = [Batch(int(b.first_offset), int(b.last_offset), int(b.delivery_state),
                             int(b.delivery_count)) for b in p.state_batches]  # fmt: skip
            try:
                code, message = await ctx.shares.state.write(
                    (group, topic.topic_id, int(p.partition)), int(p.state_epoch),
                    int(p.leader_epoch), int(p.start_offset),
                    int(getattr(p, "delivery_complete_count", -1)), batches)  # fmt: skip
            except KafkaError as exc:
                code, message = exc.error_code, str(exc)
            if code:
                ctx.metrics.request_error(API_KEY, code)
            parts.append(ctx.make("PartitionResult", partition=p.partition, error_code=code,
                                  error_message=message))  # fmt: skip
        results.append(ctx.make("WriteStateResult", topic_id=topic.topic_id, partitions=tuple(parts)))
    return ctx.respond(results=tuple(results))
