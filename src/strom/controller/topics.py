"""Topic creation, growth and deletion in a cluster: the documents any broker writes.

Any broker (the CreateTopics / CreatePartitions / DeleteTopics handlers) writes the request into
the store and the controller carries it out:

* create: ``/config/topics/<t>`` (``{"version": 1, "config": {…}}``) first, then
  ``/brokers/topics/<t>`` (Kafka's version 3, :class:`TopicDoc`; a
  crash in between leaves an orphan config, never a topic with the wrong settings); the
  controller's topic watch gives every partition its first state;
* grow: the topic document is rewritten with the new partitions, conditional on its version;
* delete: ``/admin/delete_topics/<t>`` is created.

:func:`wait_for_partitions` lets a handler answer once the controller has made the states (the
``timeout_ms`` of the request bounds it, as Kafka's delayed create).

The controller carries a deletion out in :mod:`strom.controller.deletion`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import Mapping

from strom.controller.context import TopicDoc
from strom.metadata.store import (
    MetadataStore,
    NodeExistsError,
    NoNodeError,
    StoreError,
)
from strom.metadata.zk_model import (
    DELETE_TOPICS_PATH,
    TOPIC_CONFIGS_PATH,
    partition_state_path,
    topic_path,
)
from strom.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)


# the admin side (any broker) -------------------------------------------------------------------
async def create_topic(store: MetadataStore, name: str, assignment: Mapping[int, list[int]],
                       configs: Mapping[str, str]) -> uuid.UUID:  # fmt: skip
    """Write a new topic; TOPIC_ALREADY_EXISTS if its document exists."""
    if await store.exists(topic_path(name)) is not None:
        raise KafkaError(ErrorCode.topic_already_exists, f"Topic '{name}' already exists.")
    config_doc = json.dumps({"version": 1, "config": dict(configs)}).encode()
    config_path = f"{TOPIC_CONFIGS_PATH}/{name}"
    try:
        await store.create(config_path, config_doc)
    except NodeExistsError:
        await store.set(config_path, config_doc)
    topic_id = uuid.uuid4()
    doc = TopicDoc(name, topic_id, {p: list(r) for p, r in assignment.items()},
                   extra={"version": 3})  # fmt: skip
    try:
        await store.create(topic_path(name), doc.to_json())
    except NodeExistsError:
        raise KafkaError(ErrorCode.topic_already_exists, f"Topic '{name}' already exists.") from None
    return topic_id


async def read_topic(store: MetadataStore, name: str) -> tuple[TopicDoc, int]:
    try:
        data, stat = await store.get(topic_path(name))
    except NoNodeError:
        raise KafkaError(ErrorCode.unknown_topic_or_partition,
                         f"Topic '{name}' does not exist.") from None  # fmt: skip
    return TopicDoc.from_json(name, data), stat.version


async def add_partitions(store: MetadataStore, name: str, new: Mapping[int, list[int]]) -> None:
    """Add partitions ``new`` to the topic, conditional on the document's version."""
    doc, version = await read_topic(store, name)
    clash = sorted(set(new) & set(doc.assignment))
    if clash:
        raise KafkaError(ErrorCode.invalid_partitions, f"Partitions {clash} already exist.")
    if doc.adding or doc.removing:
        raise KafkaError(ErrorCode.reassignment_in_progress,
                         f"A partition reassignment of topic '{name}' is in progress.")  # fmt: skip
    doc.assignment.update({p: list(r) for p, r in new.items()})
    try:
        await store.set(topic_path(name), doc.to_json(), version)
    except StoreError as exc:
        raise KafkaError(ErrorCode.reassignment_in_progress,
                         f"Topic '{name}' changed meanwhile ({exc}); try again.") from None  # fmt: skip


async def request_deletion(store: MetadataStore, name: str) -> None:
    with contextlib.suppress(NodeExistsError):
        await store.create(f"{DELETE_TOPICS_PATH}/{name}", make_parents=True)


async def wait_for_partitions(store: MetadataStore, name: str, partitions: list[int],
                              timeout: float) -> bool:  # fmt: skip
    """True once every partition of ``partitions`` has a state node (the controller made it)."""
    deadline = time.monotonic() + timeout
    delay = 0.01
    while True:
        states = await asyncio.gather(*(store.exists(partition_state_path(name, p))
                                        for p in partitions))  # fmt: skip
        if all(s is not None for s in states):
            return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        delay = min(delay * 2, 0.2)


async def wait_for_deletion(store: MetadataStore, name: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    delay = 0.01
    while await store.exists(f"{DELETE_TOPICS_PATH}/{name}") is not None:
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.2)
    return True
