"""TxnOffsetCommit (key 28, v0–3): consumer offsets as part of a transaction.

The producer must have added the group's ``__consumer_offsets`` partition with AddOffsetsToTxn
(else INVALID_TXN_STATE; a stale epoch is PRODUCER_FENCED). The offsets are written as a
transactional batch of the producer and become the group's committed offsets only when the
COMMIT marker reaches that partition (:meth:`GroupCoordinator.complete_txn`); the request is
answered once that batch is replicated. v3 carries the
member id and generation (KIP-447): a zombie member of an older generation is refused. In a
cluster the transaction state is checked only when this broker also coordinates the
transactional id (Kafka before KIP-890 did not check it at all).
"""

from __future__ import annotations

from typing import Any

from strom.broker import dispatch
from strom.broker.context import RequestContext
from strom.broker.group.model import OffsetEntry
from strom.broker.group.service import OFFSETS_TOPIC, wait_for_callback
from strom.broker.handlers.add_partitions_to_txn import fenced_code
from strom.protocol.errors import ErrorCode, KafkaError

API_KEY = 28


def _check(ctx: RequestContext, request: Any) -> ErrorCode:
    txn = ctx.transactions.active()
    if txn.ownership(request.transactional_id) == ErrorCode.not_coordinator:
        return ErrorCode.none  # another broker coordinates it: not verified (Kafka before KIP-890)
    code = txn.check(request.transactional_id, int(request.producer_id),
                     int(request.producer_epoch))  # fmt: skip
    if code != ErrorCode.none:
        return fenced_code(ctx, code)
    groups = ctx.groups.active()
    tp = (OFFSETS_TOPIC, groups.partition_for(request.group_id))
    if not txn.is_ongoing_with(int(request.producer_id), int(request.producer_epoch), tp):
        return ErrorCode.invalid_txn_state
    return ErrorCode.none


@dispatch.handler(API_KEY, 0, 3)
async def handle(ctx: RequestContext, request: Any) -> Any:
    codes: dict[tuple[str, int], ErrorCode] = {}
    wanted: dict[tuple[str, int], OffsetEntry] = {}
    for topic in request.topics:
        info = ctx.topics.get(topic.name)
        for p in topic.partitions:
            tp = (topic.name, int(p.partition_index))
            if info is None or tp[1] not in info.replicas:
                codes[tp] = ErrorCode.unknown_topic_or_partition
            else:
                wanted[tp] = OffsetEntry(int(p.committed_offset),
                                         int(getattr(p, "committed_leader_epoch", -1)),
                                         p.committed_metadata or "")  # fmt: skip
    if wanted:
        try:
            code = _check(ctx, request)
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
