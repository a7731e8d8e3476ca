"""WriteTxnMarkers (key 27, v1; v0 left Kafka 4 and kio): markers for this broker's partitions.

In a cluster, the transaction coordinator sends this to the partitions' leaders; a single
node writes its own markers through the same function without a request
(:func:`strom.broker.txn.service.write_txn_markers`). Operators use it too: the abort of a
hanging transaction (``strom txn abort``, ``kafka-transactions.sh abort``) is an ABORT marker
for that producer id and epoch. A marker older than the partition's producer epoch is refused
(INVALID_PRODUCER_EPOCH); one for a producer with no open transaction there changes nothing.
"""

from __future__ import annotations

from typing import Any

from strom.broker import dispatch
from strom.broker.context import RequestContext
from strom.broker.txn.coordinator import TxnMarker
from strom.broker.txn.service import write_txn_markers

API_KEY = 27


@dispatch.handler(API_KEY, 1, 1)
async def handle(ctx: RequestContext, request: Any) -> Any:
    results = []
    for m in request.markers:
        partitions = tuple((t.name, int(p)) for t in m.topics for p in t.partition_indexes)
        codes = write_txn_markers(ctx.broker, [TxnMarker(
            int(m.producer_id), int(m.producer_epoch), bool(m.transaction_result),
            int(m.coordinator_epoch), partitions)])  # fmt: skip
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
