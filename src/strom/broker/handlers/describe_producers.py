"""DescribeProducers (key 61, v0): the active producers of partitions (KIP-664), from each
partition's producer state: id, epoch, last sequence and timestamp, coordinator epoch of the
last marker, and where its open transaction starts (-1 when none). What
``strom txn find-hanging`` compares with the coordinator's transactions.

Authorization: READ on each topic, else its partitions are TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import Any

from strom.broker import authz, dispatch
from strom.broker.context import RequestContext
from strom.protocol.errors import ErrorCode, KafkaError, error_code_of

API_KEY = 61


def _partition(ctx: RequestContext, topic: str, index: int) -> Any:
    try:
        if not authz.authorize(ctx, authz.READ, authz.TOPIC, topic):
            raise KafkaError(ErrorCode.topic_authorization_failed)
        log_ = ctx.replicas.get_log(topic, index)
    except Exception as exc:
        return ctx.make("PartitionResponse", partition_index=index, error_code=error_code_of(exc),
                        error_message=str(exc)[:200], active_producers=())  # fmt: skip
    producers = tuple(
        ctx.make("ProducerState", producer_id=pid, producer_epoch=e.epoch,
                 last_sequence=e.last_seq, last_timestamp=e.last_timestamp,
                 coordinator_epoch=e.coordinator_epoch,
                 current_txn_start_offset=e.txn_first_offset)
        for pid, e in sorted(log_.producer_state.producers.items())
    )  # fmt: skip
    return ctx.make("PartitionResponse", partition_index=index, error_code=ErrorCode.none,
                    error_message=None, active_producers=producers)  # fmt: skip


@dispatch.handler(API_KEY, 0, 0)
async def handle(ctx: RequestContext, request: Any) -> Any:
    topics = tuple(
        ctx.make("TopicResponse", name=t.name,
                 partitions=tuple(_partition(ctx, t.name, int(i)) for i in t.partition_indexes))
        for t in request.topics
    )  # fmt: skip
    return ctx.respond(throttle_time=0, topics=topics)
