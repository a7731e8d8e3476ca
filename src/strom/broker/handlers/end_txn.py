"""EndTxn (key 26, v0–3): commit or abort the producer's transaction.

The coordinator persists PrepareCommit/PrepareAbort (replicated), has a marker written to every
partition of the transaction by its leader (:mod:`strom.broker.txn.markers`), then persists the
completion before answering, so a committed transaction is visible to read_committed consumers
as soon as the producer hears of it — unless the markers take longer than
:data:`strom.broker.txn.coordinator.END_WAIT_S`: then the answer comes with Prepare* durable
(Kafka's moment) and the markers keep going.

Authorization: WRITE on the TRANSACTIONAL_ID, else TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import Any

from strom.broker import authz, dispatch
from strom.broker.context import RequestContext
from strom.broker.handlers.add_partitions_to_txn import fenced_code
from strom.protocol.errors import KafkaError

API_KEY = 26


@dispatch.handler(API_KEY, 0, 3)
async def handle(ctx: RequestContext, request: Any) -> Any:
    authz.require(ctx, authz.WRITE, authz.TRANSACTIONAL_ID, str(request.transactional_id))
    try:
        code = await ctx.transactions.active().end_txn(
            request.transactional_id, int(request.producer_id), int(request.producer_epoch),
            bool(request.committed),
        )  # fmt: skip
    except KafkaError as exc:
        code = exc.error_code
    return ctx.respond(throttle_time=0, error_code=fenced_code(ctx, code))
