"""The partition layer of one broker: built, started, stopped; told of topic changes.

Built by the broker's assembly after the logs are loaded and before the listener opens:
:class:`ReplicationService` makes the replica fetchers and the ISR-change sender and attaches
them to the replica manager. :meth:`ReplicationService.start`: the high watermarks come from
their checkpoint, and a broker without a controller leads what it hosts
(:mod:`strom.replication.local_leadership`); a cluster member (or a broker told
``strom.controller.enable=false``) waits for its controller, and until the controller's
UpdateMetadata its metadata cache names this broker alone. Periodic: the ISR shrink check
(every half ``replica.lag.time.max.ms``) and the HW checkpoint (every
``replica.high.watermark.checkpoint.interval.ms``, written by the flusher). Topic creation
and deletion on this broker tell the partition layer through :meth:`partitions_created` and
:meth:`partitions_removed`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from strom.replication.isr_changes import IsrChangeManager, IsrMetrics
from strom.replication.local_leadership import ENABLE_KEY, LocalLeadership
from strom.replication.replica_fetcher import FetcherConfig, ReplicaFetcherManager

if TYPE_CHECKING:
    import uuid

    from strom.config import BrokerConfig
    from strom.metadata.topics import TopicInfo, TopicRegistry
    from strom.periodic import Periodic
    from strom.replication.metadata_cache import BrokerInfo
    from strom.replication.replica_manager import ReplicaManager

log = logging.getLogger(__name__)


def led_locally(config: BrokerConfig) -> bool:
    """Whether a broker of ``config`` is its own controller (a single node)."""
    return not (str(config.get(ENABLE_KEY, "true")).lower() == "false"
                or config.get("zookeeper.connect"))  # fmt: skip


class ReplicationService:
    def __init__(self, replicas: ReplicaManager, topics: TopicRegistry, config: BrokerConfig,
                 periodic: Periodic, me: BrokerInfo, *, source_host: str | None,
                 broker_epoch: Callable[[], int], metrics: IsrMetrics | None) -> None:  # fmt: skip
        self.replicas = replicas
        self.topics = topics
        self.config = config
        self.periodic = periodic
        self.me = me
        replicas.fetchers = ReplicaFetcherManager(replicas, FetcherConfig(
            max_wait_ms=config.get_int("replica.fetch.wait.max.ms"),
            min_bytes=config.get_int("replica.fetch.min.bytes"),
            max_bytes=config.get_int("replica.fetch.response.max.bytes"),
            partition_max_bytes=config.get_int("replica.fetch.max.bytes"),
            backoff_ms=config.get_int("replica.fetch.backoff.ms"),
            source_host=source_host,
        ))  # fmt: skip
        self.lag_ms = config.get_int("replica.lag.time.max.ms")
        self.isr = IsrChangeManager(replicas, self._topic_id, self.lag_ms,
                                    backoff_ms=config.get_int("replica.fetch.backoff.ms"),
                                    broker_epoch=broker_epoch, source_host=source_host,
                                    metrics=metrics)  # fmt: skip
        replicas.isr_changes = self.isr
        self.local = LocalLeadership(replicas, topics, me) if led_locally(config) else None

    def _topic_id(self, name: str) -> uuid.UUID | None:
        info = self.topics.get(name)
        return info.topic_id if info is not None else None

    def start(self) -> None:
        replicas = self.replicas
        replicas.load_hw_checkpoint()
        self.isr.start()
        if self.local is not None:
            self.local.start()
        else:  # a cluster member: its controller decides; until then it knows itself alone
            replicas.cache.brokers = {self.me.node_id: self.me}
        self.periodic.every(max(self.lag_ms, 20) / 2000, self.isr.shrink_check)
        every = max(self.config.get_int("replica.high.watermark.checkpoint.interval.ms"), 100)
        self.periodic.every(every / 1000, replicas.checkpoint_hw_async)

    async def stop(self) -> None:
        await self.replicas.shutdown()
        try:
            self.replicas.checkpoint_hw()
        except OSError as exc:
            log.error("could not write the high-watermark checkpoint: %s", exc)

    def partitions_created(self, info: TopicInfo, partitions: Iterable[int]) -> None:
        """New local partitions: led at once without a controller; with one, they wait for
        its LeaderAndIsr."""
        if self.local is not None:
            self.local.topic_changed(info, partitions)

    def partitions_removed(self, topic: str, partitions: Iterable[int]) -> None:
        self.replicas.forget(topic, list(partitions))
