"""OffsetForLeaderEpoch (key 23): where a leader epoch ends in a partition's log.

Consumers ask it after a seek, a reset or a leader change, with the epoch of the last record
they consumed, to detect truncation (KIP-320); followers ask it to find where their log
diverges from the leader's. The answer comes from the partition's leader-epoch cache
(:meth:`strom.storage.leader_epoch.LeaderEpochCache.end_offset_for`): the largest known epoch
<= the requested one and the offset where the next epoch starts (the log end offset for the
current epoch), or -1/-1 when the epoch is unknown. ``current_leader_epoch`` is checked first
(FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH); only the leader answers (NOT_LEADER_OR_FOLLOWER),
to consumers and to followers (``replica_id`` >= 0) truncating their logs. Served v2-v4, the versions Kafka 4 serves
(v0-1 carry no current epoch and were removed).

Authorization: a follower's request needs CLUSTER_ACTION (else CLUSTER_AUTHORIZATION_FAILED); a
consumer's DESCRIBE on each topic (else its partitions are TOPIC_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import Any

from strom.broker import authz, dispatch
from strom.broker.context import RequestContext
from strom.protocol.errors import ErrorCode, error_code_of

API_KEY = 23


def _end_offset(ctx: RequestContext, topic: str, p: Any) -> tuple[ErrorCode, int, int]:
    try:
        info = ctx.topics.get(topic)
        if info is None or p.partition not in info.replicas:
            return ErrorCode.unknown_topic_or_partition, -1, -1
        part = ctx.replicas.leader_partition(topic, p.partition,
                                                    int(p.current_leader_epoch))  # fmt: skip
    except Exception as exc:
        return error_code_of(exc), -1, -1
    log_ = part.log
    epoch, offset = log_.leader_epochs.end_offset_for(int(p.leader_epoch), log_.log_end_offset,
                                                      part.leader_epoch)  # fmt: skip
    return ErrorCode.none, epoch, offset


@dispatch.handler(API_KEY, 2, 4)
async def handle(ctx: RequestContext, request: Any) -> Any:
    if int(getattr(request, "replica_id", -1)) >= 0:  # a follower (v3+ names itself)
        authz.require_cluster(ctx, authz.CLUSTER_ACTION)
    topics = []
    for topic in request.topics:
        parts = []
        described = authz.authorize(ctx, authz.DESCRIBE, authz.TOPIC, str(topic.topic))
        for p in topic.partitions:
            if not described:
                parts.append(ctx.make("EpochEndOffset", partition=p.partition, leader_epoch=-1,
                                      error_code=ErrorCode.topic_authorization_failed,
                                      end_offset=-1))  # fmt: skip
                continue
            code, epoch, offset = _end_offset(ctx, str(topic.topic), p)
            parts.append(ctx.make("EpochEndOffset", error_code=code, partition=p.partition,
                                  leader_epoch=epoch, end_offset=offset))  # fmt: skip
        topics.append(ctx.make("OffsetForLeaderTopicResult", topic=topic.topic,
                               partitions=tuple(parts)))  # fmt: skip
    return ctx.respond(throttle_time=0, topics=tuple(topics))
