"""FindCoordinator (key 10): the broker leading the key's internal-topic partition.

A group's coordinator is the leader of its ``__consumer_offsets`` partition, a transactional
id's the leader of its ``__transaction_state`` partition, as the metadata cache says (on a
single node: this broker, always); no leader known is COORDINATOR_NOT_AVAILABLE.

v0–3 ask for one key; v4+ for a batch (``coordinator_keys``). Key type 0 is a group, key
type 1 a transactional id (the transaction coordinator); key type 2 (share group, v6) is
INVALID_REQUEST, share groups being unsupported. v5 only adds TRANSACTION_ABORTABLE to the
errors. An empty key is INVALID_REQUEST as in Kafka.
"""

from __future__ import annotations

from typing import Any

from strom.broker import dispatch
from strom.broker.context import RequestContext
from strom.broker.group.service import EXTENSION, OFFSETS_TOPIC
from strom.broker.metadata_cache import BrokerInfo
from strom.broker.txn.service import EXTENSION as TXN_EXTENSION
from strom.broker.txn.service import TXN_TOPIC
from strom.protocol.errors import ErrorCode

API_KEY = 10
GROUP_KEY_TYPE = 0
TXN_KEY_TYPE = 1


Lookup = tuple[ErrorCode, str | None, "BrokerInfo | None"]


def _leader(ctx: RequestContext, topic: str, partition: int) -> Lookup:
    """The coordinator is the leader of the key's partition of the internal topic (the metadata
    cache's); None when it is this broker."""
    cache = ctx.broker.replicas.cache
    state = cache.partition(topic, partition)
    if state is None or state.leader < 0:
        return ErrorCode.coordinator_not_available, f"{topic}-{partition} has no leader", None
    if state.leader == ctx.broker.node_id:
        return ErrorCode.none, None, None
    found = cache.broker(state.leader)
    if found is None:
        return ErrorCode.coordinator_not_available, f"broker {state.leader} is not alive", None
    return ErrorCode.none, None, found


def _lookup(ctx: RequestContext, key: str, key_type: int) -> Lookup:
    if key_type == TXN_KEY_TYPE:
        if not key:
            return ErrorCode.invalid_request, "empty transactional id", None
        txn = ctx.broker.extensions.get(TXN_EXTENSION)
        if txn is None or txn.coordinator is None:
            return ErrorCode.coordinator_not_available, "transaction coordinator not started", None
        found = _leader(ctx, TXN_TOPIC, txn.coordinator.partition_for(key))
        if found[0] != ErrorCode.none or found[2] is not None:
            return found
        owned = txn.coordinator.ownership(key)
        if owned == ErrorCode.coordinator_load_in_progress:
            return owned, None, None
        if owned != ErrorCode.none:  # led here by the cache, not yet by LeaderAndIsr
            return ErrorCode.coordinator_not_available, "not loaded yet", None
        return ErrorCode.none, None, None
    if key_type != GROUP_KEY_TYPE:
        return ErrorCode.invalid_request, f"unknown key type {key_type}", None
    if not key:
        return ErrorCode.invalid_request, "empty group id", None
    service = ctx.broker.extensions.get(EXTENSION)
    if service is None or service.coordinator is None:
        return ErrorCode.coordinator_not_available, "group coordinator not started", None
    found = _leader(ctx, OFFSETS_TOPIC, service.coordinator.partition_for(key))
    if found[0] != ErrorCode.none or found[2] is not None:
        return found
    if service.coordinator.loading:
        return ErrorCode.coordinator_load_in_progress, None, None
    return ErrorCode.none, None, None


@dispatch.handler(API_KEY, 0, 6)
async def handle(ctx: RequestContext, request: Any) -> Any:
    key_type = int(getattr(request, "key_type", 0))
    host, port = ctx.broker.advertised
    node = ctx.broker.node_id

    def answer(code: ErrorCode, message: str | None, other: BrokerInfo | None) -> dict[str, Any]:
        ok = code == ErrorCode.none
        if ok and other is not None:
            return {"error_code": code, "error_message": None, "node_id": other.node_id,
                    "host": other.host, "port": other.port}  # fmt: skip
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
