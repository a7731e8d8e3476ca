"""Partition sizes on disk, from DescribeLogDirs (API key 35), asked of the brokers that host them.

DescribeLogDirs answers only for the log dirs of the broker it is sent to, and the client
library does not offer it: it goes through :mod:`strom.cli.wire`, one request per broker.
A partition's size is its leader's log, summed over that broker's log dirs (during a move
between dirs both copies count, as Kafka's ``kafka-log-dirs.sh`` shows them), asked of the
leader itself (its address from Metadata), so it is the same whichever broker the tool was
bootstrapped with. ``strom topic describe -p`` and the console's topic pages both use it.

A partition without a leader, or whose leader cannot be asked now, is left out of the answer
(its size is unknown: -1 in the CLI, "-" in the console); one broker down must not fail the
whole description.
"""

from __future__ import annotations

import logging
from typing import Any

from strom.cli import routing, wire
from strom.cli.errors import CliError

log = logging.getLogger(__name__)
DESCRIBE_LOG_DIRS, DESCRIBE_LOG_DIRS_VERSION = 35, 4
TopicPartition = tuple[str, int]


def broker_partition_sizes(address: str, keys: list[TopicPartition]) -> dict[TopicPartition, int]:
    """Bytes of each of ``keys``' logs on the broker at ``address``, summed over its dirs;
    partitions it hosts no log of are absent. Raises :class:`CliError` when it cannot answer."""
    wanted: dict[str, list[int]] = {}
    for name, index in keys:
        wanted.setdefault(name, []).append(index)
    topics = tuple(wire.part(DESCRIBE_LOG_DIRS, DESCRIBE_LOG_DIRS_VERSION, "DescribableLogDirTopic",
                             topic=name, partitions=tuple(parts))
                   for name, parts in wanted.items())  # fmt: skip
    resp = wire.request(address, DESCRIBE_LOG_DIRS, DESCRIBE_LOG_DIRS_VERSION, topics=topics)
    wire.check(resp.error_code, "cannot describe log dirs")
    sizes: dict[TopicPartition, int] = {}
    for result in resp.results:
        if int(result.error_code) != 0:
            continue  # an offline log dir: its partitions have no size here
        for t in result.topics:
            for p in t.partitions:
                key = (t.name, int(p.partition_index))
                sizes[key] = sizes.get(key, 0) + int(p.partition_size)
    return sizes


def leader_partition_sizes(md: Any, keys: list[TopicPartition]) -> dict[TopicPartition, int]:
    """Bytes of each of ``keys``' logs on its leader, per ``md`` (confluent-kafka's
    ClusterMetadata): one DescribeLogDirs to each leading broker. Partitions without a leader,
    or whose leader did not answer (logged), are absent."""
    by_leader, _leaderless = routing.leaders(md, keys)
    sizes: dict[TopicPartition, int] = {}
    for where, led in sorted(by_leader.items()):
        try:
            found = broker_partition_sizes(where, led)
        except CliError as exc:
            log.warning("sizes of %d partition(s) on the broker at %s unknown: %s",
                        len(led), where, exc)  # fmt: skip
            continue
        sizes.update((k, found[k]) for k in led if k in found)
    return sizes
