"""InitProducerId (key 22) for idempotent producers (no transactional id).

A new producer gets a fresh id with epoch 0. A producer that already has an id and asks again
(v3+, KIP-360, after an UNKNOWN_PRODUCER_ID or sequence trouble) gets the same id with the next
epoch, which resets its sequences. Transactional ids need the transaction coordinator, which
this broker does not have yet: they are refused with a clear error, not half-served.
"""

from __future__ import annotations

from typing import Any

from strom.broker import dispatch
from strom.broker.context import RequestContext
from strom.protocol.errors import ErrorCode

API_KEY = 22
MAX_EPOCH = 32767


@dispatch.handler(API_KEY, 0, 5)
async def handle(ctx: RequestContext, request: Any) -> Any:
    if request.transactional_id is not None:
        return ctx.respond(
            throttle_time=0,
            error_code=ErrorCode.transactional_id_authorization_failed,
            producer_id=-1,
            producer_epoch=-1,
        )
    producer_id = int(getattr(request, "producer_id", -1))
    epoch = int(getattr(request, "producer_epoch", -1))
    if producer_id >= 0 and 0 <= epoch < MAX_EPOCH - 1:
        return ctx.respond(throttle_time=0, error_code=0, producer_id=producer_id, producer_epoch=epoch + 1)
    return ctx.respond(
        throttle_time=0,
        error_code=0,
        producer_id=ctx.broker.producer_ids.next_id(),
        producer_epoch=0,
    )
