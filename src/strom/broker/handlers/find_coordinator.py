"""FindCoordinator (key 10): this broker coordinates every group (single node).

v0–3 ask for one key; v4+ for a batch (``coordinator_keys``). Key type 0 is a group, key
type 1 a transactional id (the transaction coordinator); key type 2 (share group, v6) is
INVALID_REQUEST, share groups being unsupported. v5 only adds TRANSACTION_ABORTABLE to the
errors. An empty key is INVALID_REQUEST as in Kafka.
"""

from __future__ import annotations

from typing import Any

from strom.broker import dispatch
from strom.broker.context import RequestContext
from strom.broker.group.service import EXTENSION
from strom.broker.txn.service import EXTENSION as TXN_EXTENSION
from strom.protocol.errors import ErrorCode

API_KEY = 10
GROUP_KEY_TYPE = 0
TXN_KEY_TYPE = 1


def _lookup(ctx: RequestContext, key: str, key_type: int) -> tuple[ErrorCode, str | None]:
    if key_type == TXN_KEY_TYPE:
        if not key:
            return ErrorCode.invalid_request, "empty transactional id"
        txn = ctx.broker.extensions.get(TXN_EXTENSION)
        if txn is None or txn.coordinator is None:
            return ErrorCode.coordinator_not_available, "transaction coordinator not started"
        if txn.coordinator.loading:
            return ErrorCode.coordinator_load_in_progress, None
        return ErrorCode.none, None
    if key_type != GROUP_KEY_TYPE:
        return ErrorCode.invalid_request, f"unknown key type {key_type}"
    if not key:
        return ErrorCode.invalid_request, "empty group id"
    service = ctx.broker.extensions.get(EXTENSION)
    if service is None or service.coordinator is None:
        return ErrorCode.coordinator_not_available, "group coordinator not started"
    if service.coordinator.loading:
        return ErrorCode.coordinator_load_in_progress, None
    return ErrorCode.none, None


@dispatch.handler(API_KEY, 0, 6)
async def handle(ctx: RequestContext, request: Any) -> Any:
    key_type = int(getattr(request, "key_type", 0))
    host, port = ctx.broker.advertised
    node = ctx.broker.node_id

    def answer(code: ErrorCode, message: str | None) -> dict[str, Any]:
        ok = code == ErrorCode.none
        return {
            "error_code": code,
            "error_message": message if not ok else None,
            "node_id": node if ok else -1,
            "host": host if ok else "",
            "port": port if ok else -1,
        }

    if ctx.api_version >= 4:
        coordinators = tuple(
            ctx.make("Coordinator", key=key, **answer(*_lookup(ctx, key, key_type)))
            for key in request.coordinator_keys
        )
        return ctx.respond(throttle_time=0, coordinators=coordinators)
    return ctx.respond(throttle_time=0, **answer(*_lookup(ctx, request.key, key_type)))
