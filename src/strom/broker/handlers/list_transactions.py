"""ListTransactions (key 66, v0–1): the transactional ids this coordinator knows (KIP-664).

Filters as Kafka: by state names (unknown names are echoed in ``unknown_state_filters``), by
producer ids, and (v1, KIP-994) by duration: only transactions running longer than that many
milliseconds.

Authorization: only the transactional ids the principal may DESCRIBE are listed.
"""

from __future__ import annotations

from typing import Any

from strom.broker import authz, dispatch
from strom.broker.context import RequestContext
from strom.broker.txn.records import STATE_NAMES, TxnState
from strom.protocol.errors import ErrorCode, KafkaError

API_KEY = 66


@dispatch.handler(API_KEY, 0, 1)
async def handle(ctx: RequestContext, request: Any) -> Any:
    known = set(STATE_NAMES.values())
    states = set(request.state_filters)
    unknown = tuple(s for s in request.state_filters if s not in known)
    pids = {int(p) for p in request.producer_id_filters}
    duration = int(getattr(request, "duration_filter", -1))
    try:
        coord = ctx.transactions.active()
        if coord.loading:
            raise KafkaError(ErrorCode.coordinator_load_in_progress)
    except KafkaError as exc:
        return ctx.respond(throttle_time=0, error_code=exc.error_code, unknown_state_filters=unknown,
                           transaction_states=())  # fmt: skip
    now = ctx.clock.time_ms()
    out = []
    for txn_id, value in sorted(coord.txns.items()):
        name = STATE_NAMES[value.state]
        if states and name not in states:
            continue
        if pids and value.producer_id not in pids:
            continue
        if not authz.authorize(ctx, authz.DESCRIBE, authz.TRANSACTIONAL_ID, txn_id):
            continue
        if duration >= 0 and (value.state is not TxnState.ONGOING
                              or now - value.start_ms <= duration):  # fmt: skip
            continue
        out.append(ctx.make("TransactionState", transactional_id=txn_id,
                            producer_id=value.producer_id, transaction_state=name))  # fmt: skip
    return ctx.respond(throttle_time=0, error_code=ErrorCode.none, unknown_state_filters=unknown,
                       transaction_states=tuple(out))  # fmt: skip
