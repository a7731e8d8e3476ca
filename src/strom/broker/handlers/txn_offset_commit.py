"""TxnOffsetCommit (key 28, v0–3): consumer offsets as part of a transaction.

The producer must have added the group's ``__consumer_offsets`` partition with AddOffsetsToTxn
(else INVALID_TXN_STATE; a stale epoch is INVALID_PRODUCER_EPOCH, :func:`_check`). The offsets are written as a
transactional batch of the producer and become the group's committed offsets only when the
COMMIT marker reaches that partition (:meth:`GroupCoordinator.complete_txn`); the request is
answered once that batch is replicated. v3 carries the
member id and generation (KIP-447): a zombie member of an older generation is refused. In a
cluster whose transaction coordinator for the id is another broker, that broker is asked
(:mod:`strom.broker.txn.verification`), as Kafka's group coordinator does since KIP-890.

Authorization: WRITE on the TRANSACTIONAL_ID (else every partition
TRANSACTIONAL_ID_AUTHORIZATION_FAILED), READ on the GROUP (else GROUP_AUTHORIZATION_FAILED), READ
on each topic (else its partitions TOPIC_AUTHORIZATION_FAILED, not committed).
"""

from __future__ import annotations

from typing import Any

from strom.broker import authz, dispatch
from strom.broker.context import RequestContext
from strom.broker.group.model import OffsetEntry
from strom.broker.group.service import OFFSETS_TOPIC, wait_for_callback
from strom.broker.txn.verification import produce_code
from strom.protocol.errors import ErrorCode, KafkaError

API_KEY = 28


async def _check(ctx: RequestContext, request: Any) -> ErrorCode:
    """KIP-890's verification of the group's ``__consumer_offsets`` partition with the
    transaction coordinator (this broker's, or another's over AddPartitionsToTxn v4), with
    Kafka's answers: INVALID_PRODUCER_EPOCH for a fenced producer (at every version: this API
    never learnt PRODUCER_FENCED, and librdkafka treats only INVALID_PRODUCER_EPOCH as fatal
    here), INVALID_TXN_STATE when the partition is not in the transaction,
    INVALID_PRODUCER_ID_MAPPING, CONCURRENT_TRANSACTIONS, and COORDINATOR_NOT_AVAILABLE when the
    transaction coordinator could not be asked (Kafka's group coordinator's answer)."""
    txn = ctx.transactions.active()
    txn_id = request.transactional_id
    pid, epoch = int(request.producer_id), int(request.producer_epoch)
    tp = (OFFSETS_TOPIC, ctx.groups.active().partition_for(request.group_id))
    if txn.ownership(txn_id) != ErrorCode.not_coordinator:
        code = txn.verify(txn_id, pid, epoch, [tp])[tp]
        if code == ErrorCode.concurrent_transactions:
            return code  # retried by every client as it is
        code = produce_code(code)
    else:
        code = (await ctx.transactions.verifier.verify(txn, txn_id, pid, epoch, [tp]))[tp]
    return ErrorCode.coordinator_not_available if code == ErrorCode.not_enough_replicas else code


@dispatch.handler(API_KEY, 0, 3)
async def handle(ctx: RequestContext, request: Any) -> Any:
    authz.require(ctx, authz.WRITE, authz.TRANSACTIONAL_ID, str(request.transactional_id))
    authz.require(ctx, authz.READ, authz.GROUP, str(request.group_id))
    codes: dict[tuple[str, int], ErrorCode] = {}
    wanted: dict[tuple[str, int], OffsetEntry] = {}
    for topic in request.topics:
        info = ctx.topics.get(topic.name)
        readable = authz.authorize(ctx, authz.READ, authz.TOPIC, topic.name)
        for p in topic.partitions:
            tp = (topic.name, int(p.partition_index))
            if not readable:
                codes[tp] = ErrorCode.topic_authorization_failed
            elif info is None or tp[1] not in info.replicas:
                codes[tp] = ErrorCode.unknown_topic_or_partition
            else:
                wanted[tp] = OffsetEntry(int(p.committed_offset),
                                         int(getattr(p, "committed_leader_epoch", -1)),
                                         p.committed_metadata or "")  # fmt: skip
    if wanted:
        try:
            code = await _check(ctx, request)
            if code != ErrorCode.none:
                codes.update({tp: code for tp in wanted})
            else:
                coord = ctx.groups.active()
                answer: dict[tuple[str, int], ErrorCode] = await wait_for_callback(
                    lambda cb: coord.commit_txn_offsets(
                        request.group_id, int(request.producer_id), int(request.producer_epoch),
                        getattr(request, "member_id", "") or "",
                        getattr(request, "group_instance_id", None),
                        int(getattr(request, "generation_id", -1)), wanted, cb,
                    )
                )  # fmt: skip
                codes.update(answer)
        except KafkaError as exc:
            codes.update({tp: exc.error_code for tp in wanted})
    topics = tuple(
        ctx.make("TxnOffsetCommitResponseTopic", name=t.name, partitions=tuple(
            ctx.make("TxnOffsetCommitResponsePartition", partition_index=p.partition_index,
                     error_code=codes[(t.name, int(p.partition_index))])
            for p in t.partitions))
        for t in request.topics
    )  # fmt: skip
    return ctx.respond(throttle_time=0, topics=topics)
