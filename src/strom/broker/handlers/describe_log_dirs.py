"""DescribeLogDirs (key 35, v1-5): the broker's log directories and the partitions in them.

One result per log directory (``log.dirs``; by default the broker's data dir), in the
configured order, ``log_dir`` its absolute path. Each partition hosted there is listed with
``partition_size`` = the bytes of its log's segments (``Log.size``, the ``.log`` files),
``offset_lag`` 0 and ``is_future_key`` false; a replica being moved there by
AlterReplicaLogDirs (:mod:`strom.broker.log_mover`) is listed in its target directory with
``is_future_key`` true, the bytes of its segment files on disk so far as its size and the
bytes left as ``offset_lag`` (Kafka: the future log's lag behind the current one). ``topics`` null asks for
every topic, internal ones included; a requested topic or partition that is not hosted here is
simply absent, as in Kafka (no per-partition error exists in this API). v4 adds the volume's
``total_bytes``/``usable_bytes`` (``os.statvfs`` of each directory), v5 ``is_cordoned``
(never). A log directory that went offline after a disk error
(:mod:`strom.storage.log_dir_failures`) is answered with KAFKA_STORAGE_ERROR and no
partitions, as Kafka does.

Authorization: DESCRIBE on the CLUSTER, else no directory (v3+: CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from strom.broker import authz, dispatch
from strom.broker.context import RequestContext
from strom.protocol.errors import ErrorCode

API_KEY = 35
log = logging.getLogger(__name__)


def _wanted(ctx: RequestContext, request: Any) -> list[tuple[str, Iterable[int]]]:
    """(topic, partitions) asked for, only topics that exist; all of them for a null list."""
    if request.topics is None:
        every = sorted(ctx.topics, key=lambda t: t.name)
        return [(t.name, sorted(t.replicas)) for t in every]
    out: list[tuple[str, Iterable[int]]] = []
    for t in request.topics:
        if t.topic in ctx.topics:
            out.append((t.topic, sorted({int(p) for p in t.partitions})))
    return out


def _volume(path: str) -> tuple[int, int]:
    """(total, usable) bytes of the volume holding ``path``; -1s when it cannot be read."""
    try:
        st = os.statvfs(path)
    except OSError as exc:
        log.warning("statvfs of log dir %s failed: %s", path, exc)
        return -1, -1
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


def _partition(ctx: RequestContext, index: int, size: int, lag: int, future: bool) -> Any:
    return ctx.make("DescribeLogDirsPartition", partition_index=index, partition_size=size,
                    offset_lag=lag, is_future_key=future)  # fmt: skip


@dispatch.handler(API_KEY, 1, 5)
async def handle(ctx: RequestContext, request: Any) -> Any:
    if not authz.authorize_cluster(ctx, authz.DESCRIBE):  # Kafka: no directories, v3+ an error
        return ctx.respond(throttle_time=0, error_code=ErrorCode.cluster_authorization_failed,
                           results=())  # fmt: skip
    logs = ctx.logs
    per_dir: dict[Path, dict[str, list[Any]]] = {d: {} for d in logs.dirs}
    moves = ctx.services.log_mover
    for name, partitions in _wanted(ctx, request):
        for index in partitions:
            log_ = logs.get(name, index)
            if log_ is None:
                continue  # not hosted here (or no such partition): absent, as in Kafka
            per_dir.setdefault(log_.dir.parent, {}).setdefault(name, []).append(
                _partition(ctx, index, log_.size, 0, False))
            move = moves.moving(name, index) if moves is not None else None
            if move is not None:
                target, copied, left = move
                per_dir.setdefault(target, {}).setdefault(name, []).append(
                    _partition(ctx, index, copied, left, True))
    results = []
    offline = logs.failures.offline()
    for parent, topics in per_dir.items():
        path = str(parent.resolve())
        if parent in offline:  # Kafka: the directory with KAFKA_STORAGE_ERROR, nothing else
            results.append(ctx.make("DescribeLogDirsResult",
                                    error_code=ErrorCode.kafka_storage_error, log_dir=path,
                                    topics=(), total_bytes=-1, usable_bytes=-1,
                                    is_cordoned=False))  # fmt: skip
            continue
        total, usable = _volume(path) if ctx.api_version >= 4 else (-1, -1)
        made = tuple(ctx.make("DescribeLogDirsTopic", name=name, partitions=tuple(parts))
                     for name, parts in topics.items())  # fmt: skip
        results.append(ctx.make("DescribeLogDirsResult", error_code=ErrorCode.none,
                                log_dir=path, topics=made, total_bytes=total,
                                usable_bytes=usable, is_cordoned=False))  # fmt: skip
    # build() keeps the fields each version has: error_code at the top is v3+
    return ctx.respond(throttle_time=0, error_code=ErrorCode.none, results=tuple(results))
