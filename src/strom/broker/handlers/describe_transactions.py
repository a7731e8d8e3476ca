"""DescribeTransactions (key 65, v0): state, producer id and epoch, timeout, start time and
partitions of transactional ids (KIP-664). An unknown id gets TRANSACTIONAL_ID_NOT_FOUND.

Authorization: DESCRIBE on each transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED); the
transaction's topics the principal may not DESCRIBE are left out.
"""

from __future__ import annotations

import datetime
from typing import Any

from strom.broker import authz, dispatch
from strom.broker.context import RequestContext
from strom.broker.txn.records import STATE_NAMES
from strom.protocol.errors import ErrorCode, KafkaError

API_KEY = 65


def _time(ms: int) -> datetime.datetime:
    """Kafka sends -1 for "no start time" (no transaction open); kio can neither write nor
    read a negative timestamp, so strom sends 0 (the epoch) there instead."""
    return datetime.datetime.fromtimestamp(max(ms, 0) / 1000, tz=datetime.UTC)


def _state(ctx: RequestContext, txn_id: str) -> Any:
    try:
        if not authz.authorize(ctx, authz.DESCRIBE, authz.TRANSACTIONAL_ID, txn_id):
            raise KafkaError(ErrorCode.transactional_id_authorization_failed)
        coord = ctx.transactions.active()
        code = coord.ownership(txn_id)
        value = None if code != ErrorCode.none else coord.txns.get(txn_id)
    except KafkaError as exc:
        code, value = exc.error_code, None
    if value is None:
        return ctx.make("TransactionState", error_code=code or ErrorCode.transactional_id_not_found,
                        transactional_id=txn_id, transaction_state="", transaction_timeout=0,
                        transaction_start_time=_time(-1), producer_id=-1, producer_epoch=-1,
                        topics=())  # fmt: skip
    topics: dict[str, list[int]] = {}
    for topic, partition in sorted(value.partitions):
        if authz.authorize(ctx, authz.DESCRIBE, authz.TOPIC, topic):  # others left out (Kafka)
            topics.setdefault(topic, []).append(partition)
    return ctx.make(
        "TransactionState", error_code=ErrorCode.none, transactional_id=txn_id,
        transaction_state=STATE_NAMES[value.state], transaction_timeout=value.timeout_ms,
        transaction_start_time=_time(value.start_ms), producer_id=value.producer_id,
        producer_epoch=value.producer_epoch,
        topics=tuple(ctx.make("TopicData", topic=t, partitions=tuple(ps))
                     for t, ps in topics.items()),
    )  # fmt: skip


@dispatch.handler(API_KEY, 0, 0)
async def handle(ctx: RequestContext, request: Any) -> Any:
    states = tuple(_state(ctx, txn_id) for txn_id in request.transactional_ids)
    return ctx.respond(throttle_time=0, transaction_states=states)
