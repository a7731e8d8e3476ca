"""AddPartitionsToTxn (key 24, v0–4): add partitions to the producer's ongoing transaction.

Served by the transaction coordinator (:mod:`strom.broker.txn.coordinator`). Unknown topics or
partitions get UNKNOWN_TOPIC_OR_PARTITION and the rest OPERATION_NOT_ATTEMPTED, as Kafka: a
transaction never includes a partition that does not exist.

v4 (KIP-890 part 1) is the brokers' batched form: a partition leader asks ``verify_only``
whether the partitions of a transactional batch it is about to append are in the producer's
ongoing transaction (:mod:`strom.broker.txn.verification`). It is served but not advertised:
clients keep v0–3, and v5 (transaction version 2) is not served at all. A v4 transaction that
is not ``verify_only`` is added as in v3.

Authorization: v0-3: WRITE on the TRANSACTIONAL_ID (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
and WRITE on each topic (else its partitions are TOPIC_AUTHORIZATION_FAILED and the others
OPERATION_NOT_ATTEMPTED); v4 (brokers only) CLUSTER_ACTION, else CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import Any

from strom.broker import authz, dispatch
from strom.broker.context import RequestContext
from strom.protocol.errors import ErrorCode, KafkaError

API_KEY = 24


def fenced_code(ctx: RequestContext, code: ErrorCode) -> ErrorCode:
    """PRODUCER_FENCED is INVALID_PRODUCER_EPOCH for clients of older versions (KIP-588)."""
    if code == ErrorCode.producer_fenced and ctx.api_version < 2:
        return ErrorCode.invalid_producer_epoch
    return code


@dispatch.handler(API_KEY, 0, 4, advertise_max=3)
async def handle(ctx: RequestContext, request: Any) -> Any:
    if ctx.api_version >= 4:  # brokers' verification (KIP-890)
        authz.require_cluster(ctx, authz.CLUSTER_ACTION)
        return await _handle_batched(ctx, request)
    authz.require(ctx, authz.WRITE, authz.TRANSACTIONAL_ID,
                  str(request.v3_and_below_transactional_id))  # fmt: skip
    wanted = [(t.name, int(p)) for t in request.v3_and_below_topics for p in t.partitions]
    writable = authz.allowed_names(ctx, authz.WRITE, authz.TOPIC, {t for t, _ in wanted})
    unknown = set()
    for topic, partition in wanted:
        info = ctx.topics.get(topic)
        if topic not in writable or info is None or partition not in info.replicas:
            unknown.add((topic, partition))
    codes: dict[tuple[str, int], ErrorCode]
    if unknown:
        codes = {tp: (ErrorCode.topic_authorization_failed if tp[0] not in writable
                      else ErrorCode.unknown_topic_or_partition) if tp in unknown
                 else ErrorCode.operation_not_attempted for tp in wanted}  # fmt: skip
    else:
        try:
            code = await ctx.transactions.active().add_partitions(
                request.v3_and_below_transactional_id, int(request.v3_and_below_producer_id),
                int(request.v3_and_below_producer_epoch), wanted,
            )  # fmt: skip
        except KafkaError as exc:
            code = exc.error_code
        code = fenced_code(ctx, code)
        codes = {tp: code for tp in wanted}
    results = tuple(
        ctx.make("AddPartitionsToTxnTopicResult", name=t.name, results_by_partition=tuple(
            ctx.make("AddPartitionsToTxnPartitionResult", partition_index=p,
                     partition_error_code=codes[(t.name, int(p))])
            for p in t.partitions))
        for t in request.v3_and_below_topics
    )  # fmt: skip
    return ctx.respond(throttle_time=0, results_by_topic_v3_and_below=results)


async def _handle_batched(ctx: RequestContext, request: Any) -> Any:
    coordinator = ctx.transactions.active()
    results = []
    for txn in request.transactions:
        wanted = [(t.name, int(p)) for t in txn.topics for p in t.partitions]
        pid, epoch = int(txn.producer_id), int(txn.producer_epoch)
        if txn.verify_only:
            codes = coordinator.verify(txn.transactional_id, pid, epoch, wanted)
        else:
            try:
                code = await coordinator.add_partitions(txn.transactional_id, pid, epoch, wanted)
            except KafkaError as exc:
                code = exc.error_code
            codes = {tp: code for tp in wanted}
        results.append(ctx.make("AddPartitionsToTxnResult", transactional_id=txn.transactional_id,
            topic_results=tuple(ctx.make("AddPartitionsToTxnTopicResult", name=t.name,
                results_by_partition=tuple(ctx.make("AddPartitionsToTxnPartitionResult",
                    partition_index=p, partition_error_code=codes[(t.name, int(p))])
                    for p in t.partitions))
                for t in txn.topics)))  # fmt: skip
    return ctx.respond(throttle_time=0, error_code=0, results_by_transaction=tuple(results))
