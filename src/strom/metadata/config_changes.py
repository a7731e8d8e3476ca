"""Kafka's entity config change notifications: ``/config/changes/config_change_<10 digits>``.

Kafka's ZooKeeper brokers do not watch the entity config nodes (``/config/users/alice``,
``/config/clients/app``, ``/config/users/alice/clients/app`` …): they watch the children of
``/config/changes`` and re-read the entity each new notification names. A notification is a
persistent sequential node holding (Kafka's ``ConfigEntityChangeNotificationSequenceZNode``,
version 2)::

    {"version":2,"entity_path":"users/alice"}

the entity's path under ``/config``, its names sanitized as in the node's own path.

strom's brokers watch the entity nodes themselves and never read these; a writer adds one
after each change so that a Kafka broker sharing the ZooKeeper applies it too. Kafka's brokers
delete notifications older than 15 minutes; strom has no node creation times, so the writer
keeps the newest :data:`KEEP` and deletes older ones (a Kafka broker reads a new one within
moments, long before a hundred more are written). A notification that cannot be written is
logged and the change stands: strom's brokers have it already.
"""

from __future__ import annotations

import contextlib
import json
import logging

from strom.metadata.store import MetadataStore, NoNodeError, StoreError

CHANGES_PATH = "/config/changes"
PREFIX = "config_change_"
KEEP = 100
log = logging.getLogger(__name__)


def notification(entity_path: str) -> bytes:
    """The node's data, as Kafka's Jackson writes it."""
    return json.dumps({"version": 2, "entity_path": entity_path}, separators=(",", ":")).encode()


async def notify(store: MetadataStore, entity_path: str) -> str | None:
    """Announce a change of ``/config/<entity_path>``; the notification's path, None when it
    could not be written (logged)."""
    try:
        path = await store.create_sequential(f"{CHANGES_PATH}/{PREFIX}",
                                             notification(entity_path))  # fmt: skip
        nodes = sorted(n for n in await store.children(CHANGES_PATH) if n.startswith(PREFIX))
        for old in nodes[:max(0, len(nodes) - KEEP)]:
            with contextlib.suppress(NoNodeError):  # a Kafka broker purged it first
                await store.delete(f"{CHANGES_PATH}/{old}")
    except StoreError as exc:
        log.warning("change notification for %s not written: %s", entity_path, exc)
        return None
    return path
