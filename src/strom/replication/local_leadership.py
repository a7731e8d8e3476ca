"""A broker without a controller leads every partition it hosts (single node).

A single node is its own controller: at start-up, and whenever a topic is created or grown
here, it applies the LeaderAndIsr and UpdateMetadata commands a controller would have sent it
(:mod:`strom.replication.commands`) — itself the leader in leader epoch 0, ISR and replicas
[itself], controller epoch 0, itself the only live broker and the controller — through the
replica manager's own :meth:`~strom.replication.replica_manager.ReplicaManager.apply_leader_and_isr`
and :meth:`~strom.replication.replica_manager.ReplicaManager.apply_update_metadata`. So the
single node runs the partition layer like any cluster member, its HW is its log end after
each append, and what users see does not change.

Off with ``strom.controller.enable=false`` or a ``zookeeper.connect`` (a cluster member) (the
first is internal, for tests that act as the controller: the broker then waits for a
controller's requests; this is also what a cluster member does). While it is on
(:attr:`ReplicaManager.led_locally`), requests of remote controllers are refused
(STALE_CONTROLLER_EPOCH): nobody else may move a single node's partitions.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from strom.replication.commands import (
    LeaderAndIsr,
    PartitionMetadata,
    PartitionRole,
    UpdateMetadata,
)
from strom.replication.metadata_cache import BrokerInfo, PartitionInfo

if TYPE_CHECKING:
    from strom.metadata.topics import TopicInfo, TopicRegistry
    from strom.replication.replica_manager import ReplicaManager

log = logging.getLogger(__name__)
ENABLE_KEY = "strom.controller.enable"
LOCAL_CONTROLLER_EPOCH = 0
LOCAL_LEADER_EPOCH = 0


class LocalLeadership:
    """Leads, on ``replicas``, every hosted partition of ``topics``; ``me`` is this broker's
    advertised endpoint (the only live broker UpdateMetadata names)."""

    def __init__(self, replicas: ReplicaManager, topics: TopicRegistry, me: BrokerInfo) -> None:
        self.replicas = replicas
        self.topics = topics
        self.me = me

    def start(self) -> None:
        """Lead every hosted partition (called once the logs are loaded)."""
        self.replicas.led_locally = True
        hosted: dict[str, list[int]] = {}
        for (topic, index), _log in self.replicas.logs.logs():
            hosted.setdefault(topic, []).append(index)
        infos = [(info, sorted(hosted[info.name])) for info in self.topics
                 if info.name in hosted]  # fmt: skip
        self.lead(infos)
        log.info("leading %d partitions of %d topics locally (no controller)",
                 sum(len(p) for _i, p in infos), len(infos))  # fmt: skip

    def lead(self, topics: Iterable[tuple[TopicInfo, list[int]]]) -> None:
        """Apply the LeaderAndIsr + UpdateMetadata making this broker the leader of
        ``partitions`` of each topic."""
        node = self.me.node_id
        me = (node,)
        roles: list[PartitionRole] = []
        states: list[PartitionMetadata] = []
        for info, partitions in topics:
            for p in partitions:
                roles.append(PartitionRole(info.name, p, node, LOCAL_LEADER_EPOCH, me, 0, me))
                states.append(PartitionMetadata(info.name, p, PartitionInfo(
                    node, LOCAL_LEADER_EPOCH, me, me, 0)))  # fmt: skip
        self.replicas.apply_leader_and_isr(LeaderAndIsr(
            node, LOCAL_CONTROLLER_EPOCH, -1, tuple(roles)))  # fmt: skip
        self.replicas.apply_update_metadata(UpdateMetadata(
            node, LOCAL_CONTROLLER_EPOCH, -1, (self.me,), tuple(states)))  # fmt: skip

    def topic_changed(self, info: TopicInfo, partitions: Iterable[int]) -> None:
        """``partitions`` of ``info`` were created here: lead them."""
        self.lead([(info, sorted(partitions))])
