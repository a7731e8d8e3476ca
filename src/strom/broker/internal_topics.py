"""The internal topics ``__consumer_offsets``, ``__transaction_state`` and
``__share_group_state``, created on first use.

As in Kafka, none exists until a client needs it: the first FindCoordinator of a group
(``__consumer_offsets``) or of a transactional id (``__transaction_state``) creates it, and is
answered COORDINATOR_NOT_AVAILABLE until it exists and its partition has a leader (clients
retry); ``__share_group_state`` is created by the first share-group state request
(:mod:`strom.broker.share.persister`). Creating it at broker start-up, as strom once did, let the first broker of a cluster
create it alone, with its replication factor capped to the one live broker.

The first two are compacted, with ``<prefix>.num.partitions`` partitions,
``<prefix>.segment.bytes`` and ``<prefix>.replication.factor`` replicas (3 by default); in a
cluster ``__transaction_state`` has ``min.insync.replicas`` = ``transaction.state.log.min.isr``
and ``__share_group_state`` ``share.coordinator.state.topic.min.isr``. ``__share_group_state``
holds deltas (ShareUpdate records), which compaction would drop, so it is
``cleanup.policy=delete`` as in Kafka (KIP-932), with ``retention.ms=-1``: the share coordinator
itself deletes the records no key needs any more (:mod:`strom.broker.share.state_service`). In a cluster the replication
factor is capped to the live brokers with a WARNING (a development cluster;
:func:`strom.controller.admin.create_registered`); a single node's topics have its one replica.
One creation at a time per topic and broker (single flight); a failed creation is tried again
by the next FindCoordinator; another broker creating it meanwhile is fine (the existing topic
is used).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from strom.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from strom.broker.topics import Topics
    from strom.config import BrokerConfig
    from strom.metadata.topics import TopicInfo, TopicRegistry

log = logging.getLogger(__name__)
OFFSETS_TOPIC = "__consumer_offsets"
TXN_TOPIC = "__transaction_state"
SHARE_STATE_TOPIC = "__share_group_state"
#: topic -> the prefix of its broker configs (``<prefix>.num.partitions`` …)
CONFIG_PREFIX = {OFFSETS_TOPIC: "offsets.topic", TXN_TOPIC: "transaction.state.log",
                 SHARE_STATE_TOPIC: "share.coordinator.state.topic"}  # fmt: skip
#: how long FindCoordinator waits for a creation it started before answering
#: COORDINATOR_NOT_AVAILABLE (a single node's creation is local and done well within it)
FIND_COORDINATOR_WAIT_S = 1.0


def partition_count(registry: TopicRegistry, config: BrokerConfig, name: str) -> int:
    """The topic's partition count if it exists, else the configured one it will have."""
    info = registry.get(name)
    if info is not None:
        return info.partition_count
    return config.get_int(f"{CONFIG_PREFIX[name]}.num.partitions")


class InternalTopics:
    """Single-flight creation of the internal topics of one broker."""

    def __init__(self, topics: Topics, config: BrokerConfig) -> None:
        self.topics = topics
        self.config = config
        self._creating: dict[str, asyncio.Task[None]] = {}

    async def ensure(self, name: str, wait_s: float = FIND_COORDINATOR_WAIT_S) -> TopicInfo | None:
        """The topic if it exists; else start creating it (once) and wait up to ``wait_s``
        for it; None while it is still being created (or its creation failed)."""
        info = self.topics.get(name)
        if info is not None:
            return info
        task = self._creating.get(name)
        if task is None or task.done():
            task = asyncio.get_running_loop().create_task(self._create(name))
            self._creating[name] = task
        await asyncio.wait({task}, timeout=wait_s)
        return self.topics.get(name)

    async def _create(self, name: str) -> None:
        config = self.config
        prefix = CONFIG_PREFIX[name]
        partitions = config.get_int(f"{prefix}.num.partitions")
        rf = max(config.get_int(f"{prefix}.replication.factor"), 1)
        configs = {"cleanup.policy": "compact",
                   "segment.bytes": str(config.get_int(f"{prefix}.segment.bytes"))}  # fmt: skip
        if name == SHARE_STATE_TOPIC:
            configs.update({"cleanup.policy": "delete", "retention.ms": "-1"})
        if name in (TXN_TOPIC, SHARE_STATE_TOPIC) and self.topics.cluster:
            # Kafka's <prefix>.min.isr (lowered with the RF when that is capped)
            min_isr = min(config.get_int(f"{prefix}.min.isr"), rf)
            configs["min.insync.replicas"] = str(max(1, min_isr))
        try:
            await self.topics.create(name, partitions, rf, configs)
            log.info("created internal topic %s (%d partitions)", name, partitions)
        except KafkaError as exc:
            if exc.error_code is not ErrorCode.topic_already_exists:
                log.warning("creating internal topic %s failed: %s", name, exc)
        except Exception:
            log.exception("creating internal topic %s failed", name)

    async def close(self) -> None:
        for task in self._creating.values():
            task.cancel()
        for task in self._creating.values():
            with contextlib.suppress(BaseException):  # cancelled, or failed and logged
                await task
        self._creating.clear()

