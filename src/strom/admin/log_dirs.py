"""Log directories of the brokers, from DescribeLogDirs (API key 35), asked of each broker.

DescribeLogDirs answers only for the log dirs of the broker it is sent to, and the client
library does not offer it: it goes through :mod:`strom.admin.wire`, one request per broker.

A partition's size is its leader's log, summed over that broker's log dirs (during a move
between dirs both copies count, as Kafka's ``kafka-log-dirs.sh`` shows them), asked of the
leader itself (its address from Metadata), so it is the same whichever broker the tool was
bootstrapped with. A partition without a leader, or whose leader cannot be asked now, is left
out of the answer (its size is unknown: -1 in the CLI, "-" in the console); one broker down
must not fail the whole description.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from strom.admin import routing, wire
from strom.admin.errors import AdminError

log = logging.getLogger(__name__)
DESCRIBE_LOG_DIRS, DESCRIBE_LOG_DIRS_VERSION = 35, 4
TopicPartition = tuple[str, int]


class BrokerDirs:
    """One DescribeLogDirs answer: the broker's online log dirs, where its replicas are
    (``current``) and where a copy is being made (``future``), and the size of each replica
    summed over its dirs (``sizes``)."""

    def __init__(self, response: Any) -> None:
        self.dirs: list[str] = []
        self.current: dict[TopicPartition, str] = {}
        self.future: dict[TopicPartition, str] = {}
        self.sizes: dict[TopicPartition, int] = {}
        for result in response.results:
            if int(result.error_code) != 0:
                continue  # an offline log dir: no home, no target, no size
            self.dirs.append(str(result.log_dir))
            for t in result.topics:
                for p in t.partitions:
                    key = (str(t.name), int(p.partition_index))
                    where = self.future if p.is_future_key else self.current
                    where[key] = str(result.log_dir)
                    self.sizes[key] = self.sizes.get(key, 0) + int(p.partition_size)


def describe(address: str, keys: Iterable[TopicPartition], timeout: float) -> BrokerDirs:
    """The log dirs of the broker at ``address`` and its replicas among ``keys`` (none: only
    the dirs). An :class:`AdminError` when it cannot answer."""
    by_topic: dict[str, list[int]] = {}
    for t, p in keys:
        by_topic.setdefault(t, []).append(p)
    topics = tuple(wire.part(DESCRIBE_LOG_DIRS, DESCRIBE_LOG_DIRS_VERSION, "DescribableLogDirTopic",
                             topic=t, partitions=tuple(sorted(ps)))
                   for t, ps in sorted(by_topic.items()))  # fmt: skip
    resp = wire.request(address, DESCRIBE_LOG_DIRS, DESCRIBE_LOG_DIRS_VERSION, wait_s=timeout,
                        topics=topics)  # fmt: skip
    wire.check(resp.error_code, f"cannot describe the log dirs of the broker at {address}")
    return BrokerDirs(resp)


def broker_partition_sizes(address: str, keys: list[TopicPartition], timeout: float
                           ) -> dict[TopicPartition, int]:  # fmt: skip
    """Bytes of each of ``keys``' logs on the broker at ``address``, summed over its dirs;
    partitions it hosts no log of are absent."""
    return describe(address, keys, timeout).sizes


def leader_partition_sizes(md: Any, keys: list[TopicPartition], timeout: float
                           ) -> dict[TopicPartition, int]:  # fmt: skip
    """Bytes of each of ``keys``' logs on its leader, per ``md`` (confluent-kafka's
    ClusterMetadata): one DescribeLogDirs to each leading broker. Partitions without a leader,
    or whose leader did not answer (logged), are absent."""
    by_leader, _leaderless = routing.leaders(md, keys)
    sizes: dict[TopicPartition, int] = {}
    for where, led in sorted(by_leader.items()):
        try:
            found = broker_partition_sizes(where, led, timeout)
        except AdminError as exc:
            log.warning("sizes of %d partition(s) on the broker at %s unknown: %s",
                        len(led), where, exc)  # fmt: skip
            continue
        sizes.update((k, found[k]) for k in led if k in found)
    return sizes
