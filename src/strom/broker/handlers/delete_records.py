"""DeleteRecords (key 21): move partitions' log start offset forward.

An offset of -1 means the high watermark; an offset beyond the high watermark (or another
negative one) is OFFSET_OUT_OF_RANGE. The answer is the partition's new low watermark (log
start offset); records below it are no longer served and their segments become deletable.

Authorization: DELETE on each topic, else its partitions are TOPIC_AUTHORIZATION_FAILED and keep
their records.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from strom.broker import authz, dispatch
from strom.broker.context import RequestContext
from strom.protocol.errors import ErrorCode, KafkaError, error_code_of

API_KEY = 21
HIGH_WATERMARK = -1
log = logging.getLogger(__name__)


def _delete(ctx: RequestContext, topic: str, partition: int, offset: int) -> int:
    authz.require(ctx, authz.DELETE, authz.TOPIC, topic)
    info = ctx.topics.get(topic)
    if info is None or partition not in info.replicas:
        raise KafkaError(
            ErrorCode.unknown_topic_or_partition, f"{topic}-{partition} does not exist"
        )
    log_ = ctx.replicas.get_log(topic, partition)
    if offset == HIGH_WATERMARK:
        offset = log_.high_watermark
    if offset < 0 or offset > log_.high_watermark:
        raise KafkaError(
            ErrorCode.offset_out_of_range,
            f"offset {offset} is outside {topic}-{partition}'s range "
            f"[{log_.log_start_offset}, {log_.high_watermark}]",
        )
    return int(log_.delete_records_before(offset))


@dispatch.handler(API_KEY, 0, 2)
async def handle(ctx: RequestContext, request: Any) -> Any:
    topics = []
    for topic in request.topics:
        parts = []
        for p in topic.partitions:
            try:
                low, code = (
                    _delete(ctx, topic.name, p.partition_index, int(p.offset)),
                    ErrorCode.none,
                )
            except Exception as exc:
                low, code = -1, error_code_of(exc)
                if code == ErrorCode.unknown_server_error:
                    log.exception("DeleteRecords on %s-%s failed", topic.name, p.partition_index)
            parts.append(
                ctx.make(
                    "DeleteRecordsPartitionResult",
                    partition_index=p.partition_index,
                    low_watermark=low,
                    error_code=code,
                )
            )
        topics.append(
            ctx.make("DeleteRecordsTopicResult", name=topic.name, partitions=tuple(parts))
        )
    # the new log start offsets' checkpoints (written by the flusher thread) are on disk
    # before the answer; one barrier covers every partition's
    await asyncio.wrap_future(ctx.logs.flusher.barrier())
    return ctx.respond(throttle_time=0, topics=tuple(topics))
