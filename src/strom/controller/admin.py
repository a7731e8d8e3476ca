"""The cluster path of CreateTopics, CreatePartitions and DeleteTopics, on any broker.

A broker is in cluster mode when ``zookeeper.connect`` is set (Kafka's own property; ``strom
serve --zookeeper`` sets it). Then the topic handlers (through :class:`strom.broker.topics.Topics`)
do not make logs themselves: they compute the assignment from the live brokers (read from
``/brokers/ids``, with their ``broker.rack``), write it to the store
(:mod:`strom.controller.topics`), and answer once the controller has carried it out (every
partition has a state; deletion: the request node is gone), within the request's timeout
(REQUEST_TIMED_OUT after it, the work goes on), as Kafka's delayed create and delete do.
The logs are made by the replicas when LeaderAndIsr reaches them.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING

from strom.controller import topics
from strom.controller.assignment import assign_replicas, validate_assignment
from strom.metadata.store import MetadataStore, NoNodeError
from strom.metadata.topics import INTERNAL_TOPICS
from strom.metadata.zk_model import BROKER_IDS_PATH, TOPICS_PATH, BrokerRegistration, broker_path
from strom.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from strom.metadata.topics import TopicInfo, TopicRegistry

log = logging.getLogger(__name__)
_BROKERS_WAIT_S = 10.0  # how long auto-creation waits for the replication factor's brokers


async def live_brokers(store: MetadataStore) -> dict[int, str | None]:
    """Registered brokers -> rack."""
    try:
        ids = await store.children(BROKER_IDS_PATH)
    except NoNodeError:
        return {}
    found: dict[int, str | None] = {}
    for name in ids:
        try:
            data, _ = await store.get(broker_path(int(name)))
        except (NoNodeError, ValueError):
            continue
        found[int(name)] = BrokerRegistration.from_json(int(name), data).rack
    return found


async def create_registered(store: MetadataStore, registry: TopicRegistry, node_id: int,
                            name: str, partitions: int, replication_factor: int,
                            configs: Mapping[str, str], timeout: float = 30.0) -> TopicInfo:  # fmt: skip
    """A broker's own creation of a topic in cluster mode (auto-creation, internal topics):
    created through the controller, returned once this broker's topic ``registry`` knows it.
    It waits (up to 10 s) for as many live brokers as the replication factor; then an
    internal topic's replication factor is capped to the live brokers, with a warning (a
    development cluster)."""
    live = await _enough_brokers(store, replication_factor, min(timeout, _BROKERS_WAIT_S))
    if name in INTERNAL_TOPICS and replication_factor > len(live) > 0:
        log.warning("topic %s: replication factor %d capped to the %d live brokers", name,
                    replication_factor, len(live))  # fmt: skip
        replication_factor = len(live)
        min_isr = configs.get("min.insync.replicas")
        if min_isr is not None and int(min_isr) > replication_factor:  # writable when capped
            configs = {**configs, "min.insync.replicas": str(replication_factor)}
    try:
        await create_topic(store, name, partitions, replication_factor, configs, None, live,
                           timeout)  # fmt: skip
    except KafkaError as exc:
        if exc.error_code != ErrorCode.topic_already_exists:
            raise
        # another broker created it meanwhile (auto-creation, internal topics): use that one
    deadline = time.monotonic() + timeout
    while (info := registry.get(name)) is None:
        if time.monotonic() >= deadline:
            raise _timed_out(f"Registering topic '{name}' on broker {node_id}", timeout)
        await asyncio.sleep(0.02)
    return info


async def _enough_brokers(store: MetadataStore, wanted: int,
                          timeout: float) -> dict[int, str | None]:  # fmt: skip
    """The live brokers once there are ``wanted`` of them, or whatever registered within
    ``timeout`` (brokers of a cluster starting together register within moments)."""
    deadline = time.monotonic() + timeout
    while True:
        live = await live_brokers(store)
        if len(live) >= wanted or time.monotonic() >= deadline:
            return live
        await asyncio.sleep(0.1)


def _timed_out(what: str, timeout: float) -> KafkaError:
    return KafkaError(ErrorCode.request_timed_out,
                      f"{what} not completed within {timeout:g}s; it goes on.")  # fmt: skip


async def create_topic(store: MetadataStore, name: str, partitions: int, replication_factor: int,
                       configs: Mapping[str, str], assignment: Mapping[int, list[int]] | None,
                       live: Mapping[int, str | None], timeout: float) -> uuid.UUID:  # fmt: skip
    if assignment:
        validate_assignment(assignment, set(live))
    else:
        assignment = assign_replicas(live, partitions, replication_factor)
    topic_id = await topics.create_topic(store, name, assignment, configs)
    if not await topics.wait_for_partitions(store, name, sorted(assignment),
                                            timeout if timeout > 0 else 60.0):  # fmt: skip
        raise _timed_out(f"Creating topic '{name}'", timeout)
    return topic_id


async def add_partitions(store: MetadataStore, name: str, count: int,
                         assignment: list[list[int]] | None, live: Mapping[int, str | None],
                         timeout: float, validate_only: bool) -> None:  # fmt: skip
    doc, _version = await topics.read_topic(store, name)
    current = len(doc.assignment)
    if count < current:
        raise KafkaError(ErrorCode.invalid_partitions, f"Topic currently has {current} "
                         f"partitions, which is higher than the requested {count}.")  # fmt: skip
    if count == current:
        raise KafkaError(ErrorCode.invalid_partitions, f"Topic already has {current} partitions.")
    rf = len(doc.assignment.get(0) or next(iter(doc.assignment.values()), [])) or 1
    if assignment:
        if len(assignment) != count - current:
            raise KafkaError(ErrorCode.invalid_replica_assignment,
                             f"Increasing the number of partitions by {count - current} but "
                             f"{len(assignment)} assignments provided.")  # fmt: skip
        new = {current + i: list(r) for i, r in enumerate(assignment)}
        validate_assignment(new, set(live), replication_factor=rf)
    else:
        ordered = sorted(live)
        first = (doc.assignment.get(0) or [ordered[0]])[0]
        start = ordered.index(first) if first in ordered else -1
        new = assign_replicas(live, count - current, rf, start_partition=current,
                              fixed_start=start)  # fmt: skip
    if validate_only:
        return
    await topics.add_partitions(store, name, new)
    if not await topics.wait_for_partitions(store, name, sorted(new),
                                            timeout if timeout > 0 else 60.0):  # fmt: skip
        raise _timed_out(f"Adding partitions to '{name}'", timeout)


async def topic_by_id(store: MetadataStore, topic_id: uuid.UUID) -> str | None:
    try:
        names = await store.children(TOPICS_PATH)
    except NoNodeError:
        return None
    for name in names:
        try:
            doc, _ = await topics.read_topic(store, name)
        except KafkaError:
            continue
        if doc.topic_id == topic_id:
            return name
    return None


async def delete_topic(store: MetadataStore, name: str | None, topic_id: uuid.UUID | None,
                       timeout: float) -> tuple[str, uuid.UUID]:  # fmt: skip
    if topic_id is not None and topic_id != uuid.UUID(int=0):
        name = await topic_by_id(store, topic_id)
        if name is None:
            raise KafkaError(ErrorCode.unknown_topic_id, f"Topic id {topic_id} does not exist.")
    if not name:
        raise KafkaError(ErrorCode.unknown_topic_or_partition, "Topic '' does not exist.")
    doc, _ = await topics.read_topic(store, name)
    if name in INTERNAL_TOPICS:
        raise KafkaError(ErrorCode.invalid_request,
                         f"Topic {name} is an internal topic and cannot be deleted.")  # fmt: skip
    await topics.request_deletion(store, name)
    if not await topics.wait_for_deletion(store, name, timeout if timeout > 0 else 60.0):
        raise _timed_out(f"Deleting topic '{name}'", timeout)
    return name, doc.topic_id

__all__ = ["add_partitions", "create_registered", "create_topic", "delete_topic", "live_brokers"]
