"""Wiring of the partition layer into a broker: start-up, periodic work, shutdown.

At start (after the logs are loaded, before the listener opens): the high watermarks come
from their checkpoint, the replica fetchers and the ISR-change sender are made, and a broker
without a controller leads what it hosts (:mod:`strom.broker.local_leadership`). Periodic:
the ISR shrink check (every half ``replica.lag.time.max.ms``) and the HW checkpoint (every
``replica.high.watermark.checkpoint.interval.ms``, written by the flusher). Topic creation
and deletion on this broker tell the partition layer through :func:`partitions_created` and
:func:`partitions_removed`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from strom.broker import local_leadership
from strom.broker.isr_changes import IsrChangeManager
from strom.broker.replica_fetcher import FetcherConfig, ReplicaFetcherManager

if TYPE_CHECKING:
    import uuid

    from strom.broker.broker import Broker
    from strom.metadata.topics import TopicInfo

log = logging.getLogger(__name__)


def start(broker: Broker) -> None:
    replicas = broker.replicas
    config = broker.config
    replicas.load_hw_checkpoint()
    source = broker.listen[0] if broker.listen[0] not in ("", "0.0.0.0", "::") else None
    replicas.fetchers = ReplicaFetcherManager(replicas, FetcherConfig(
        max_wait_ms=config.get_int("replica.fetch.wait.max.ms"),
        min_bytes=config.get_int("replica.fetch.min.bytes"),
        max_bytes=config.get_int("replica.fetch.response.max.bytes"),
        partition_max_bytes=config.get_int("replica.fetch.max.bytes"),
        backoff_ms=config.get_int("replica.fetch.backoff.ms"),
        source_host=source,
    ))  # fmt: skip
    lag_ms = config.get_int("replica.lag.time.max.ms")

    def topic_id(name: str) -> uuid.UUID | None:
        info = broker.topics.get(name)
        return info.topic_id if info is not None else None

    isr = IsrChangeManager(replicas, topic_id, lag_ms,
                           backoff_ms=config.get_int("replica.fetch.backoff.ms"),
                           broker_epoch=lambda: int(getattr(broker, "broker_epoch", -1)),
                           source_host=source)  # fmt: skip
    isr.metrics = broker.metrics.replication
    replicas.isr_changes = isr
    isr.start()
    if (str(config.get(local_leadership.ENABLE_KEY, "true")).lower() == "false"
            or config.get("zookeeper.connect")):  # a cluster member: its controller decides
        local_leadership.start_without(broker)
    else:
        local_leadership.start(broker)
    broker.every(max(lag_ms, 20) / 2000, isr.shrink_check)
    every = max(config.get_int("replica.high.watermark.checkpoint.interval.ms"), 100) / 1000
    broker.every(every, replicas.checkpoint_hw_async)


async def stop(broker: Broker) -> None:
    replicas = broker.replicas
    await replicas.shutdown()
    try:
        replicas.checkpoint_hw()
    except OSError as exc:
        log.error("could not write the high-watermark checkpoint: %s", exc)


def partitions_created(broker: Broker, info: TopicInfo, partitions: Iterable[int]) -> None:
    """New local partitions: led at once without a controller; with one, they wait for its
    LeaderAndIsr."""
    leadership = broker.extensions.get(local_leadership.EXTENSION)
    if leadership is not None:
        leadership.topic_changed(info, partitions)


def partitions_removed(broker: Broker, topic: str, partitions: Iterable[int]) -> None:
    broker.replicas.forget(topic, list(partitions))
