"""WriteTxnMarkers (key 27, v1; v0 left Kafka 4 and kio): markers for this broker's partitions.

The transaction coordinator sends this to the partitions' leaders
(:class:`strom.broker.txn.markers.MarkerChannel`; a partition it leads itself goes through the
same :func:`strom.broker.txn.markers.write_local` without a request). Each partition is appended
as its leader and answered once replicated (acks=all); NOT_LEADER_OR_FOLLOWER off the leader,
NOT_ENOUGH_REPLICAS under min ISR — the coordinator retries those. Operators use it too: the
abort of a hanging transaction (``strom txn abort``, ``kafka-transactions.sh abort``) is an
ABORT marker for that producer id and epoch. A marker older than the partition's producer epoch
is refused (INVALID_PRODUCER_EPOCH), one from an older coordinator epoch than the producer's
last marker there TRANSACTION_COORDINATOR_FENCED; one for a producer with no open transaction
there changes nothing.

Authorization: CLUSTER_ACTION on the CLUSTER, else the whole request is CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import asyncio
from typing import Any

from strom.broker import authz, dispatch
from strom.broker.context import RequestContext
from strom.broker.txn.coordinator import TxnMarker

API_KEY = 27


@dispatch.handler(API_KEY, 1, 1)
async def handle(ctx: RequestContext, request: Any) -> Any:
    authz.require_cluster(ctx, authz.CLUSTER_ACTION)
    markers = [TxnMarker(int(m.producer_id), int(m.producer_epoch), bool(m.transaction_result),
                         int(m.coordinator_epoch),
                         tuple((t.name, int(p)) for t in m.topics for p in t.partition_indexes))
               for m in request.markers]  # fmt: skip
    channel = ctx.transactions.markers
    all_codes = await asyncio.gather(*(channel.write_local(m, m.partitions) for m in markers))
    results = []
    for m, codes in zip(request.markers, all_codes, strict=True):
        topics = tuple(
            ctx.make("WritableTxnMarkerTopicResult", name=t.name, partitions=tuple(
                ctx.make("WritableTxnMarkerPartitionResult", partition_index=p,
                         error_code=codes[(t.name, int(p))])
                for p in t.partition_indexes))
            for t in m.topics
        )  # fmt: skip
        results.append(ctx.make("WritableTxnMarkerResult", producer_id=m.producer_id,
                                topics=topics))  # fmt: skip
    return ctx.respond(markers=tuple(results))
