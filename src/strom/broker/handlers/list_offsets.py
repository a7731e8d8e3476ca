"""ListOffsets (key 2): earliest (-2), latest (-1), max timestamp (-3), or by timestamp.

Latest is the high watermark, the last stable offset under read_committed (isolation_level 1,
v2+). By timestamp (and max timestamp): the first offset whose timestamp is at or after it,
or -1 when there is none below that latest offset (what a client can fetch). Tiered storage does not exist here, so earliest-local (-4, v8+) is the
log start offset and latest-tiered (-5, v9+) and earliest-pending-upload (-6, v11+) are -1
(epoch -1), as Kafka answers for a topic without remote storage. v10 adds a timeout for
remote reads (unused).

A leader elected with a high watermark still below its epoch's start offset (a follower
learns the HW one fetch late) answers a client's latest, and a timestamp lookup that lands at
or past the HW, with OFFSET_NOT_AVAILABLE until its followers' fetches move the HW up, as
Kafka does (``Partition.fetchOffsetForTimestamp``); clients retry it. Answering the stale HW
instead told Java's admin client that a partition holding 5 records ended at 0.

Only the leader answers (NOT_LEADER_OR_FOLLOWER elsewhere). Leader epochs (v4+): the
request's ``current_leader_epoch`` is checked (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH,
:meth:`strom.replication.partition.Partition.check_leader_epoch`); the answer carries the epoch that
wrote the offset found (the leader-epoch cache's), the current epoch for latest, as Kafka.

Authorization: DESCRIBE on each topic, else its partitions are TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import Any

from strom.broker import authz, dispatch
from strom.broker.context import RequestContext
from strom.protocol.errors import ErrorCode, KafkaError, error_code_of

API_KEY = 2
LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5
EARLIEST_PENDING_UPLOAD = -6


def _lookup(ctx: RequestContext, topic: str, partition: int, ts: int, current_epoch: int,
            read_committed: bool, client: bool) -> tuple[int, int, int]:  # fmt: skip
    """(timestamp, offset, leader epoch) of the answer; raises KafkaError."""
    part = ctx.replicas.leader_partition(topic, partition, current_epoch)
    log_ = part.log
    # a new leader whose HW has not yet reached the start of its epoch (module docstring)
    lagging = client and part.leader_epoch_start > log_.high_watermark
    fetchable = log_.last_stable_offset if read_committed else log_.high_watermark
    if ts == LATEST:
        if lagging:
            raise KafkaError(ErrorCode.offset_not_available)
        return -1, fetchable, part.leader_epoch
    if ts in (LATEST_TIERED, EARLIEST_PENDING_UPLOAD):
        return -1, -1, -1  # no tiered storage: nothing is (or waits to be) in remote storage
    if ts in (EARLIEST, EARLIEST_LOCAL):
        timestamp, offset = -1, log_.log_start_offset
    elif ts == MAX_TIMESTAMP:
        found = log_.max_timestamp_offset()
        timestamp, offset = (found[1], found[0]) if found else (-1, -1)
    else:
        found = log_.offset_for_timestamp(ts)
        timestamp, offset = (found[1], found[0]) if found else (-1, -1)
    if ts not in (EARLIEST, EARLIEST_LOCAL) and client and offset >= fetchable:
        # Kafka answers only offsets a client can fetch (below the HW, the LSO under
        # read_committed): none, or OFFSET_NOT_AVAILABLE while the HW lags (above)
        if lagging:
            raise KafkaError(ErrorCode.offset_not_available)
        timestamp, offset = -1, -1
    epoch = log_.leader_epochs.epoch_for_offset(offset) if offset >= 0 else -1
    if offset >= 0 and epoch < 0:
        epoch = part.leader_epoch  # an empty log: its next batch is written in the current epoch
    return timestamp, offset, epoch


@dispatch.handler(API_KEY, 1, 11)
async def handle(ctx: RequestContext, request: Any) -> Any:
    topics = []
    read_committed = int(getattr(request, "isolation_level", 0)) == 1
    client = int(getattr(request, "replica_id", -1)) < 0  # a consumer (-1) or debug (-2)
    for topic in request.topics:
        parts = []
        denied = not authz.authorize(ctx, authz.DESCRIBE, authz.TOPIC, topic.name)
        for p in topic.partitions:
            try:
                if denied:
                    raise KafkaError(ErrorCode.topic_authorization_failed)
                timestamp, offset, epoch = _lookup(
                    ctx, topic.name, p.partition_index, int(p.timestamp),
                    int(getattr(p, "current_leader_epoch", -1)), read_committed, client,
                )  # fmt: skip
                code = ErrorCode.none
            except Exception as exc:
                timestamp, offset, epoch, code = -1, -1, -1, error_code_of(exc)
            parts.append(
                ctx.make(
                    "ListOffsetsPartitionResponse",
                    partition_index=p.partition_index,
                    error_code=code,
                    timestamp=timestamp,
                    offset=offset,
                    leader_epoch=epoch,
                )
            )
        topics.append(ctx.make("ListOffsetsTopicResponse", name=topic.name, partitions=tuple(parts)))
    return ctx.respond(throttle_time=0, topics=tuple(topics))
