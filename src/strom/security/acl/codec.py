"""ACLs in the metadata store, in Kafka's ZooKeeper layout (``kafka.zk.ZkAclStore``).

Paths (``<Type>`` is the camel-case resource type: ``Topic``, ``Group``, ``Cluster``,
``TransactionalId``, ``DelegationToken``, ``User``)::

    /kafka-acl/<Type>/<name>                      LITERAL patterns (name "*" is the wildcard)
    /kafka-acl-extended/prefixed/<Type>/<name>    PREFIXED patterns
    /kafka-acl-changes/acl_changes_<10 digits>    "<Type>:<name>" of a changed LITERAL pattern
    /kafka-acl-extended-changes/acl_changes_<10 digits>
        {"version":1,"resourceType":"TOPIC","name":"...","patternType":"PREFIXED"}

A resource node holds every entry of its pattern::

    {"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",
                          "operation":"Read","host":"*"}]}

Kafka writes names unescaped (a ZooKeeper node name cannot hold ``/``); strom writes a name
with ``%`` or ``/`` (possible in group names and transactional ids) percent-escaped, and every
other name as Kafka does.
"""

from __future__ import annotations

import json
from urllib.parse import quote, unquote

from strom.security.acl.model import (
    AccessControlEntry,
    AclError,
    AclOperation,
    PatternType,
    PermissionType,
    ResourcePattern,
    ResourceType,
)

LITERAL_ROOT = "/kafka-acl"
EXTENDED_ROOT = "/kafka-acl-extended"
PREFIXED_ROOT = "/kafka-acl-extended/prefixed"
LITERAL_CHANGES = "/kafka-acl-changes"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
ROOTS = {PatternType.LITERAL: LITERAL_ROOT, PatternType.PREFIXED: PREFIXED_ROOT}
STORED_TYPES = tuple(t for t in ResourceType if t > ResourceType.ANY)


def _escape(name: str) -> str:
    return quote(name, safe="") if ("/" in name or "%" in name or name in (".", "..")) else name


def _unescape(node: str) -> str:
    return unquote(node) if "%" in node else node


def type_path(pattern_type: PatternType, resource_type: ResourceType) -> str:
    return f"{ROOTS[pattern_type]}/{resource_type.camel}"


def resource_path(pattern: ResourcePattern) -> str:
    return f"{type_path(pattern.pattern_type, pattern.resource_type)}/{_escape(pattern.name)}"


def name_of(node: str) -> str:
    return _unescape(node)


def encode_entries(entries: frozenset[AccessControlEntry] | set[AccessControlEntry]) -> bytes:
    acls = [{"principal": e.principal, "permissionType": e.permission.camel,
             "operation": e.operation.camel, "host": e.host} for e in sorted(entries)]  # fmt: skip
    return json.dumps({"version": 1, "acls": acls}, separators=(",", ":")).encode()


def decode_entries(data: bytes) -> set[AccessControlEntry]:
    if not data:
        return set()
    try:
        doc = json.loads(data)
        return {AccessControlEntry(str(a["principal"]), str(a["host"]),
                                   AclOperation.parse(str(a["operation"])),  # type: ignore[arg-type]
                                   PermissionType.parse(str(a["permissionType"])))  # type: ignore[arg-type]
                for a in doc.get("acls", ())}  # fmt: skip
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise AclError(f"unreadable ACL node: {exc}") from None


def change_root(pattern_type: PatternType) -> str:
    return LITERAL_CHANGES if pattern_type == PatternType.LITERAL else EXTENDED_CHANGES


def encode_change(pattern: ResourcePattern) -> bytes:
    if pattern.pattern_type == PatternType.LITERAL:
        return f"{pattern.resource_type.camel}:{pattern.name}".encode()
    return json.dumps({"version": 1, "resourceType": pattern.resource_type.name,
                       "name": pattern.name, "patternType": pattern.pattern_type.name},
                      separators=(",", ":")).encode()  # fmt: skip


def decode_change(root: str, data: bytes) -> ResourcePattern:
    text = data.decode()
    if root == LITERAL_CHANGES:
        kind, sep, name = text.partition(":")
        if not sep:
            raise AclError(f"ACL change {text!r} is not <ResourceType>:<name>")
        return ResourcePattern(ResourceType.parse(kind), name, PatternType.LITERAL)  # type: ignore[arg-type]
    try:
        doc = json.loads(text)
        return ResourcePattern(ResourceType.parse(doc["resourceType"]), str(doc["name"]),  # type: ignore[arg-type]
                               PatternType.parse(doc["patternType"]))  # type: ignore[arg-type]
    except (ValueError, KeyError, TypeError) as exc:
        raise AclError(f"unreadable ACL change {text!r}: {exc}") from None


def change_sequence(node: str) -> int:
    """The sequence number of a change node's name (-1 for a name that is not one)."""
    digits = node[len(CHANGE_PREFIX):] if node.startswith(CHANGE_PREFIX) else ""
    return int(digits) if digits.isdigit() else -1


def change_node(sequence: int) -> str:
    return f"{CHANGE_PREFIX}{sequence:010d}"
