"""AddOffsetsToTxn (key 25, v0–3): add the group's ``__consumer_offsets`` partition to the
producer's transaction, before TxnOffsetCommit writes offsets there.

Authorization: WRITE on the TRANSACTIONAL_ID (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED), then
READ on the GROUP (else GROUP_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import Any

from strom.broker import authz, dispatch
from strom.broker.context import RequestContext
from strom.broker.group.records import partition_for
from strom.broker.group.service import OFFSETS_TOPIC
from strom.broker.handlers.add_partitions_to_txn import fenced_code
from strom.protocol.errors import ErrorCode, KafkaError

API_KEY = 25


@dispatch.handler(API_KEY, 0, 3)
async def handle(ctx: RequestContext, request: Any) -> Any:
    authz.require(ctx, authz.WRITE, authz.TRANSACTIONAL_ID, str(request.transactional_id))
    authz.require(ctx, authz.READ, authz.GROUP, str(request.group_id))
    info = ctx.topics.get(OFFSETS_TOPIC)
    if not request.group_id:
        code = ErrorCode.invalid_group_id
    elif info is None:
        code = ErrorCode.coordinator_not_available
    else:
        tp = (OFFSETS_TOPIC, partition_for(request.group_id, info.partition_count))
        try:
            code = await ctx.transactions.active().add_partitions(
                request.transactional_id, int(request.producer_id), int(request.producer_epoch),
                [tp],
            )  # fmt: skip
        except KafkaError as exc:
            code = exc.error_code
    return ctx.respond(throttle_time=0, error_code=fenced_code(ctx, code))
