"""Coordinator partition ownership: who loads which partition of an internal topic.

A coordinator (transactions: ``__transaction_state``; groups: ``__consumer_offsets``) serves
the keys that hash to the partitions this broker *leads*, and only those (Kafka's
``onLeadershipChange`` / ``onResignation`` callbacks from ``ReplicaManager`` to the group and
transaction coordinators). The replica manager calls :meth:`CoordinatorPartitions.elected`
when a LeaderAndIsr makes this broker the leader of a partition in a new leader epoch — after
the partition's log exists and the new epoch is in force — and :meth:`resigned` when it stops
leading it (becomes a follower, StopReplica, the topic goes away). Listeners registered for the
topic then load the partition (replay its log; their requests for its keys answer
COORDINATOR_LOAD_IN_PROGRESS meanwhile) or unload it (its keys answer NOT_COORDINATOR).

Invariants:

- a listener hears ``elected(p, epoch)`` at most once per leader epoch of ``p``, and
  ``resigned(p)`` only after an ``elected(p, …)``; in between it may hear a newer ``elected``
  (a re-election at a higher epoch: reload);
- :meth:`register` replays ``elected`` for every partition of the topic this broker leads at
  that moment, so a service starting after LeaderAndIsr (a single node leads its partitions
  before its services start) misses nothing;
- the leader epoch given is the coordinator's epoch for that partition (Kafka's
  ``coordinatorEpoch``), carried in what the coordinator writes elsewhere (transaction markers)
  so a deposed coordinator's late writes can be told apart;
- a listener's exception is logged and does not stop the LeaderAndIsr being applied.

Callbacks run on the event loop, inside the LeaderAndIsr handling: they must not block; a
listener schedules its loading as a task.
"""

from __future__ import annotations

import logging
from typing import Protocol

from strom.metadata.topics import INTERNAL_TOPICS

log = logging.getLogger(__name__)
TopicPartition = tuple[str, int]


class PartitionOwnershipListener(Protocol):
    def on_elected(self, partition: int, leader_epoch: int) -> None:
        """This broker now leads ``partition`` in ``leader_epoch``: load it."""

    def on_resigned(self, partition: int) -> None:
        """This broker no longer leads ``partition``: unload it."""


class CoordinatorPartitions:
    """Leadership of internal-topic partitions, fanned out to the coordinators."""

    def __init__(self, topics: frozenset[str] | set[str] = frozenset(INTERNAL_TOPICS)) -> None:
        self.topics = frozenset(topics)
        self._listeners: dict[str, list[PartitionOwnershipListener]] = {}
        self._led: dict[TopicPartition, int] = {}  # partition -> leader epoch, while led

    def register(self, topic: str, listener: PartitionOwnershipListener) -> None:
        """Listen to ``topic``'s leadership; hears at once of the partitions led now."""
        self._listeners.setdefault(topic, []).append(listener)
        for (name, index), epoch in sorted(self._led.items()):
            if name == topic:
                self._call(listener.on_elected, topic, index, epoch)

    def unregister(self, topic: str, listener: PartitionOwnershipListener) -> None:
        found = self._listeners.get(topic, [])
        if listener in found:
            found.remove(listener)

    def leader_epoch(self, topic: str, index: int) -> int | None:
        """The leader epoch this broker leads the partition in, None when it does not."""
        return self._led.get((topic, index))

    def elected(self, topic: str, index: int, leader_epoch: int) -> None:
        if topic not in self.topics or self._led.get((topic, index)) == leader_epoch:
            return
        self._led[(topic, index)] = leader_epoch
        for listener in list(self._listeners.get(topic, ())):
            self._call(listener.on_elected, topic, index, leader_epoch)

    def resigned(self, topic: str, index: int) -> None:
        if self._led.pop((topic, index), None) is None:
            return
        for listener in list(self._listeners.get(topic, ())):
            self._call(listener.on_resigned, topic, index)

    @staticmethod
    def _call(fn: object, topic: str, index: int, *args: int) -> None:
        try:
            fn(index, *args)  # type: ignore[operator]
        except Exception:
            log.exception("coordinator callback for %s-%d failed", topic, index)
