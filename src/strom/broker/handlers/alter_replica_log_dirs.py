"""AlterReplicaLogDirs (key 34, v1-2, KIP-113): move replicas between this broker's log dirs.

Each ``dirs[].path`` must be one of the broker's ``log.dirs`` (compared as absolute paths),
else every partition listed under it gets LOG_DIR_NOT_FOUND. A partition without a replica
here gets REPLICA_NOT_AVAILABLE; KAFKA_STORAGE_ERROR when the copy cannot start (no room,
the target unwritable). NONE means the move started (or the replica is already there): it
completes in the background (:mod:`strom.broker.log_mover`) while DescribeLogDirs shows the
copy with ``is_future_key`` true in the target directory; a copy that fails later leaves the
replica where it was (logged), as Kafka's ReplicaAlterLogDirsThread marks the future log
offline without touching the current one.

Authorization: ALTER on the CLUSTER, else the whole request is CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from strom.broker import authz, dispatch
from strom.broker.context import RequestContext
from strom.protocol.errors import ErrorCode

API_KEY = 34


@dispatch.handler(API_KEY, 1, 2)
async def handle(ctx: RequestContext, request: Any) -> Any:
    authz.require_cluster(ctx, authz.ALTER)
    known = {Path(d).resolve(): Path(d) for d in ctx.logs.dirs}
    results: dict[str, list[Any]] = {}
    for entry in request.dirs:
        raw = Path(entry.path)
        target = known.get(raw.resolve()) if raw.is_absolute() else None
        for topic in entry.topics:
            for index in topic.partitions:
                if target is None:
                    code = ErrorCode.log_dir_not_found
                else:
                    code = ctx.services.log_mover.start(topic.name, int(index), target)
                results.setdefault(topic.name, []).append(ctx.make(
                    "AlterReplicaLogDirPartitionResult", partition_index=index,
                    error_code=code))  # fmt: skip
    out = tuple(ctx.make("AlterReplicaLogDirTopicResult", topic_name=name,
                         partitions=tuple(parts)) for name, parts in results.items())  # fmt: skip
    return ctx.respond(throttle_time=0, results=out)
