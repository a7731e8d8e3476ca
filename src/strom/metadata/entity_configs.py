"""Kafka's entity config nodes: ``/config/<entity type>/<sanitized name>``.

Each node holds ``{"version": 1, "config": {"<key>": "<string value>", ...}}``, as Kafka's
``AdminZkClient.changeConfigs`` writes it. The user entity (``/config/users/<user>``) holds
keys of two owners: the SCRAM credentials (``SCRAM-SHA-256`` / ``SCRAM-SHA-512``, see
:mod:`strom.security.scram_credentials`) and the client quotas (``producer_byte_rate`` …).
So every write here is a read-modify-write of the keys one owner changes, conditional on the
node's version (a concurrent writer of other keys is never overwritten: the change is
re-applied to what it wrote), and the node is never deleted (a user's ``clients/<id>`` quota
children may hang below it; Kafka leaves an empty config too).

Names are sanitized as Kafka's ``Sanitizer.sanitize`` does: URL-encoded UTF-8 with ``*`` as
``%2A`` and a space as ``%20`` (so ``/`` and every other non-``[A-Za-z0-9._-]`` character is
escaped, and a name is always one path element).

After each write a change notification (``/config/changes/config_change_<seq>``,
:mod:`strom.metadata.config_changes`) tells Kafka's brokers sharing the store to re-read the
node, as Kafka's ``AdminZkClient.changeConfigs`` does; strom's brokers watch the nodes
themselves.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from urllib.parse import quote, unquote

from strom.metadata import config_changes
from strom.metadata.store import BadVersionError, MetadataStore, NodeExistsError, NoNodeError

CONFIG_PATH = "/config"
USERS = "users"
USERS_PATH = f"{CONFIG_PATH}/{USERS}"
_ATTEMPTS = 20


class ConcurrentChangeError(Exception):
    """The node kept changing under a read-modify-write."""


def sanitize(name: str) -> str:
    """Kafka's ``Sanitizer.sanitize``: a name as one ZooKeeper path element (Java's URLEncoder,
    which leaves ``a-zA-Z0-9.-*_``, then ``*`` as ``%2A`` and a space as ``%20``: what
    ``quote`` gives, but for ``~``)."""
    return quote(name, safe="").replace("~", "%7E")


def desanitize(node_name: str) -> str:
    return unquote(node_name)


def entity_path(entity_type: str, name: str) -> str:
    return f"{CONFIG_PATH}/{entity_type}/{sanitize(name)}"


def parse_document(data: bytes) -> dict[str, str]:
    """The ``config`` of a node (ValueError if it is not Kafka's document)."""
    if not data:
        return {}
    doc = json.loads(data)
    if not isinstance(doc, dict) or not isinstance(doc.get("config", {}), dict):
        raise ValueError("not a Kafka entity config document")
    return {str(k): str(v) for k, v in doc.get("config", {}).items()}


def document(config: Mapping[str, str]) -> bytes:
    return json.dumps({"version": 1, "config": dict(config)}, separators=(",", ":")).encode()


async def read(store: MetadataStore, entity_type: str, name: str) -> dict[str, str]:
    """The entity's config, ``{}`` when it has no node."""
    try:
        data, _ = await store.get(entity_path(entity_type, name))
    except NoNodeError:
        return {}
    return parse_document(data)


async def update(store: MetadataStore, entity_type: str, name: str,
                 change: Callable[[dict[str, str]], dict[str, str]]) -> dict[str, str]:  # fmt: skip
    """Apply ``change`` (given a copy of the current config, returning the new one) as a
    conditional write, retried on a concurrent change; the config written. ``change`` may
    raise to abort (nothing is written). A change notification follows the write."""
    path = entity_path(entity_type, name)
    for _attempt in range(_ATTEMPTS):
        try:
            data, stat = await store.get(path)
        except NoNodeError:
            new = change({})
            try:
                await store.create(path, document(new))
            except NodeExistsError:
                continue  # made meanwhile: apply the change to what it holds
            await config_changes.notify(store, path.removeprefix(CONFIG_PATH + "/"))
            return new
        new = change(parse_document(data))
        try:
            await store.set(path, document(new), stat.version)
        except (BadVersionError, NoNodeError):
            continue
        await config_changes.notify(store, path.removeprefix(CONFIG_PATH + "/"))
        return new
    raise ConcurrentChangeError(f"{path} kept changing; nothing written")


async def read_all(store: MetadataStore, entity_type: str) -> dict[str, dict[str, str]]:
    """Every entity of a type: name -> config (unreadable nodes left out)."""
    base = f"{CONFIG_PATH}/{entity_type}"
    try:
        names = await store.children(base)
    except NoNodeError:
        return {}
    out: dict[str, dict[str, str]] = {}
    for node in names:
        try:
            data, _ = await store.get(f"{base}/{node}")
            out[desanitize(node)] = parse_document(data)
        except (NoNodeError, ValueError):
            continue
    return out
