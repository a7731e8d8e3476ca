"""InitProducerId (key 22): producer ids and epochs for idempotent and transactional producers.

Idempotent (no transactional id): a new producer gets a fresh id with epoch 0. A producer that
already has an id and asks again (v3+, KIP-360, after an UNKNOWN_PRODUCER_ID or sequence
trouble) gets the same id with the next epoch, which resets its sequences.

Transactional: the transaction coordinator (:mod:`strom.broker.txn.coordinator`) keeps one
producer id per transactional id and bumps its epoch at every InitProducerId, aborting a
transaction the previous instance left open: that fences it (PRODUCER_FENCED).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from strom.broker import dispatch
from strom.broker.context import RequestContext
from strom.broker.txn.service import txn_coordinator_of
from strom.protocol.errors import ErrorCode, KafkaError

API_KEY = 22
MAX_EPOCH = 32767


def _ms(value: Any) -> int:
    return int(value.total_seconds() * 1000) if isinstance(value, timedelta) else int(value)


@dispatch.handler(API_KEY, 0, 4)
async def handle(ctx: RequestContext, request: Any) -> Any:
    producer_id = int(getattr(request, "producer_id", -1))
    epoch = int(getattr(request, "producer_epoch", -1))
    if request.transactional_id is not None:
        try:
            coord = txn_coordinator_of(ctx.broker)
            code, pid, new_epoch = coord.init_producer_id(
                request.transactional_id, _ms(request.transaction_timeout), producer_id, epoch
            )
        except KafkaError as exc:
            code, pid, new_epoch = exc.error_code, -1, -1
        if code == ErrorCode.producer_fenced and ctx.api_version < 4:
            code = ErrorCode.invalid_producer_epoch  # PRODUCER_FENCED came with v4 (KIP-588)
        return ctx.respond(throttle_time=0, error_code=code, producer_id=pid,
                           producer_epoch=new_epoch)  # fmt: skip
    if producer_id >= 0 and 0 <= epoch < MAX_EPOCH - 1:
        return ctx.respond(throttle_time=0, error_code=0, producer_id=producer_id, producer_epoch=epoch + 1)
    return ctx.respond(
        throttle_time=0,
        error_code=0,
        producer_id=ctx.broker.producer_ids.next_id(),
        producer_epoch=0,
    )
