"""InitProducerId (key 22, v0–4): a producer id and epoch for an idempotent producer.

Kafka's rules (``KafkaApis.handleInitProducerIdRequest``, ``TransactionCoordinator``): a request
naming only one of producer id and epoch (v3+) is INVALID_REQUEST; an empty transactional id is
INVALID_REQUEST; without a transactional id the answer is a **new** producer id with epoch 0,
whatever id the request names (see :mod:`strom.broker.producer_ids`: a named id is never bumped
for a caller that cannot own it). A transactional id is answered by the transaction coordinator
(:func:`init_transactional_id`, :mod:`strom.broker.txn.coordinator`): the next epoch of the
producer id it owns, aborting a transaction the previous instance left open, which fences that
instance. PRODUCER_FENCED is answered INVALID_PRODUCER_EPOCH before v4, which older clients
understand.

Authorization: a transactional id needs WRITE on it (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
an idempotent producer IDEMPOTENT_WRITE on the CLUSTER or WRITE on some topic (else
CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

import logging
from typing import Any

from strom.broker import authz, dispatch
from strom.broker.context import RequestContext
from strom.broker.producer_ids import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, ProducerIdAndEpoch
from strom.protocol.errors import ErrorCode, KafkaError

API_KEY = 22
log = logging.getLogger(__name__)
Answer = tuple[ErrorCode, int, int]  # error, producer id, epoch


async def init_transactional_id(
    ctx: RequestContext, transactional_id: str, timeout_ms: int, expected: ProducerIdAndEpoch | None
) -> Answer:
    """The transaction coordinator's answer (its epoch rule is ``producer_ids.init_transactional``)."""
    try:
        await ctx.services.producer_ids.ensure_available()  # the coordinator may take a new id
    except Exception as exc:
        log.warning("producer id block could not be reserved: %s", exc)
        return ErrorCode.coordinator_load_in_progress, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
    try:
        coord = ctx.transactions.active()
        return await coord.init_producer_id(transactional_id, timeout_ms, expected)
    except KafkaError as exc:
        return exc.error_code, NO_PRODUCER_ID, NO_PRODUCER_EPOCH


async def new_idempotent_id(ctx: RequestContext) -> Answer:
    try:
        await ctx.services.producer_ids.ensure_available()
        return ErrorCode.none, ctx.services.producer_ids.next_id(), 0
    except Exception as exc:  # the metadata store could not reserve a block: retriable
        log.warning("producer id block could not be reserved: %s", exc)
        return ErrorCode.coordinator_load_in_progress, NO_PRODUCER_ID, NO_PRODUCER_EPOCH


def _denied(ctx: RequestContext, transactional_id: str | None) -> ErrorCode | None:
    """Kafka's checks: WRITE on the transactional id; an idempotent producer IDEMPOTENT_WRITE on
    the cluster or WRITE on some topic (KIP-679)."""
    if ctx.services.authorizer is None:
        return None
    if transactional_id:
        if not authz.authorize(ctx, authz.WRITE, authz.TRANSACTIONAL_ID, transactional_id):
            return ErrorCode.transactional_id_authorization_failed
    elif transactional_id is None and not (
            authz.authorize_cluster(ctx, authz.IDEMPOTENT_WRITE)
            or authz.authorize_any(ctx, authz.WRITE, authz.TOPIC)):  # fmt: skip
        return ErrorCode.cluster_authorization_failed
    return None


@dispatch.handler(API_KEY, 0, 5)
async def handle(ctx: RequestContext, request: Any) -> Any:
    producer_id = int(getattr(request, "producer_id", NO_PRODUCER_ID))
    epoch = int(getattr(request, "producer_epoch", NO_PRODUCER_EPOCH))
    transactional_id = request.transactional_id
    answer: Answer
    denied = _denied(ctx, transactional_id)
    if denied is not None:
        answer = denied, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
    elif (producer_id == NO_PRODUCER_ID) != (epoch == NO_PRODUCER_EPOCH):
        answer = ErrorCode.invalid_request, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
    elif transactional_id is None:
        answer = await new_idempotent_id(ctx)
    elif transactional_id == "":
        answer = ErrorCode.invalid_request, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
    else:
        expected = None if producer_id == NO_PRODUCER_ID else ProducerIdAndEpoch(producer_id, epoch)
        timeout = request.transaction_timeout  # a kio timedelta
        timeout_ms = round(timeout.total_seconds() * 1000)
        answer = await init_transactional_id(ctx, transactional_id, timeout_ms, expected)
    error, pid, new_epoch = answer
    if error is ErrorCode.producer_fenced and ctx.api_version < 4:
        error = ErrorCode.invalid_producer_epoch
    return ctx.respond(
        throttle_time=0, error_code=error, producer_id=pid, producer_epoch=new_epoch
    )
