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
from strom.storage.log import Log

API_KEY = 21
HIGH_WATERMARK = -1
log = logging.getLogger(__name__)


def _delete(ctx: RequestContext, topic: str, partition: int, offset: int) -> tuple[int, Log]:
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
    return int(log_.delete_records_before(offset)), log_


@dispatch.handler(API_KEY, 0, 2)
async def handle(ctx: RequestContext, request: Any) -> Any:
    # (topic, [(partition, low watermark, error code, its log or None)])
    done: list[tuple[str, list[tuple[int, int, ErrorCode, Log | None]]]] = []
    for topic in request.topics:
        parts: list[tuple[int, int, ErrorCode, Log | None]] = []
        for p in topic.partitions:
            try:
                low, log_ = _delete(ctx, topic.name, p.partition_index, int(p.offset))
                parts.append((p.partition_index, low, ErrorCode.none, log_))
            except Exception as exc:
                code = error_code_of(exc)
                if code == ErrorCode.unknown_server_error:
                    log.exception("DeleteRecords on %s-%s failed", topic.name, p.partition_index)
                parts.append((p.partition_index, -1, code, None))
        done.append((topic.name, parts))
    # the new log start offsets' checkpoints (written by the flusher thread) are on disk
    # before the answer; one barrier covers every partition's. A partition whose checkpoint
    # write failed (a full disk: Log.log_start_written stayed behind) is not answered as
    # deleted: a restart would serve its records again.
    await asyncio.wrap_future(ctx.logs.flusher.barrier())
    topics = []
    for name, parts in done:
        results = []
        for index, low, code, moved in parts:
            if moved is not None and moved.log_start_written < low:
                low, code = -1, ErrorCode.kafka_storage_error
            results.append(ctx.make("DeleteRecordsPartitionResult", partition_index=index,
                                    low_watermark=low, error_code=code))  # fmt: skip
        topics.append(ctx.make("DeleteRecordsTopicResult", name=name, partitions=tuple(results)))
    return ctx.respond(throttle_time=0, topics=tuple(topics))
