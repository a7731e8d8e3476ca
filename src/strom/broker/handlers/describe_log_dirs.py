"""DescribeLogDirs (key 35, v1-5): the broker's log directories and the partitions in them.

strom has one log directory, the broker's data dir (its absolute path is ``log_dir``). Each
partition hosted here is listed with ``partition_size`` = the bytes of its log's segments
(``Log.size``, the ``.log`` files), ``offset_lag`` 0 (no replica movement between dirs) and
``is_future_key`` false (AlterReplicaLogDirs does not exist here). ``topics`` null asks for
every topic, internal ones included; a requested topic or partition that is not hosted here is
simply absent, as in Kafka (no per-partition error exists in this API). v4 adds the volume's
``total_bytes``/``usable_bytes`` (``os.statvfs`` of the data dir), v5 ``is_cordoned`` (never).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from typing import Any

from strom.broker import dispatch
from strom.broker.context import RequestContext
from strom.protocol.errors import ErrorCode

API_KEY = 35
log = logging.getLogger(__name__)


def _wanted(ctx: RequestContext, request: Any) -> list[tuple[str, Iterable[int]]]:
    """(topic, partitions) asked for, only topics that exist; all of them for a null list."""
    if request.topics is None:
        every = sorted(ctx.broker.topics, key=lambda t: t.name)
        return [(t.name, sorted(t.replicas)) for t in every]
    out: list[tuple[str, Iterable[int]]] = []
    for t in request.topics:
        if t.topic in ctx.broker.topics:
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


@dispatch.handler(API_KEY, 1, 5)
async def handle(ctx: RequestContext, request: Any) -> Any:
    topics = []
    for name, partitions in _wanted(ctx, request):
        parts = []
        for index in partitions:
            log_ = ctx.broker.logs.get(name, index)
            if log_ is None:
                continue  # not hosted here (or no such partition): absent, as in Kafka
            parts.append(ctx.make("DescribeLogDirsPartition", partition_index=index,
                                  partition_size=log_.size, offset_lag=0,
                                  is_future_key=False))  # fmt: skip
        if parts:
            topics.append(ctx.make("DescribeLogDirsTopic", name=name, partitions=tuple(parts)))
    log_dir = str(ctx.broker.data_dir.resolve())
    total, usable = _volume(log_dir) if ctx.api_version >= 4 else (-1, -1)
    result = ctx.make("DescribeLogDirsResult", error_code=ErrorCode.none, log_dir=log_dir,
                      topics=tuple(topics), total_bytes=total, usable_bytes=usable,
                      is_cordoned=False)  # fmt: skip
    # build() keeps the fields each version has: error_code at the top is v3+
    return ctx.respond(throttle_time=0, error_code=ErrorCode.none, results=(result,))
