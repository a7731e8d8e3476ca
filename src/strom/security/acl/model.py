"""Kafka's ACL model: resource patterns, access control entries, bindings and their filters.

The numeric codes are Kafka's wire codes (``ResourceType``, ``PatternType``, ``AclOperation``,
``AclPermissionType`` in ``org.apache.kafka.common``), used by CreateAcls / DescribeAcls /
DeleteAcls; the names are Kafka's too, in the two spellings Kafka uses: the enum name
(``TRANSACTIONAL_ID``, ``IDEMPOTENT_WRITE``) on the command line and in the extended change
events, and the camel-case one (``TransactionalId``, ``IdempotentWrite``) in ZooKeeper's ACL
documents and paths (:mod:`strom.security.acl.codec`).

Invariants (Kafka's ``AclBinding`` rules, checked by :func:`validate_binding`): a binding stored
is specific — no ANY / MATCH / UNKNOWN anywhere; a CLUSTER resource is named ``kafka-cluster``
and LITERAL; a principal is ``"<type>:<name>"``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

WILDCARD = "*"  #: a LITERAL resource name, an ACL's host or a principal's name matching all
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"


class AclError(ValueError):
    """A binding or filter Kafka would refuse (answered INVALID_REQUEST or the like)."""


class _Named(enum.IntEnum):
    @classmethod
    def parse(cls, text: str) -> _Named:
        """By enum name or camel-case name, case-insensitively (``prefixed``, ``DescribeConfigs``)."""
        key = text.replace("-", "_").replace(" ", "").upper()
        for member in cls:
            if member.name == key or member.name.replace("_", "") == key:
                return member
        raise AclError(f"unknown {cls.__name__} {text!r}")

    @property
    def camel(self) -> str:
        return "".join(part.capitalize() for part in self.name.split("_"))


class ResourceType(_Named):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(_Named):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(_Named):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class PermissionType(_Named):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


#: ALLOW of one of these grants DESCRIBE as well (Kafka's implied operations; DENY implies none)
IMPLIES_DESCRIBE = frozenset({AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE,
                              AclOperation.DELETE, AclOperation.ALTER})  # fmt: skip
IMPLIES_DESCRIBE_CONFIGS = frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS})

#: the operations that apply to each resource type (Kafka's ``AclEntry.supportedOperations``;
#: ALL applies to every type). KIP-430's authorized operations are reported from these.
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE,
                         AclOperation.DESCRIBE, AclOperation.DELETE, AclOperation.ALTER,
                         AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS),
    ResourceType.GROUP: (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE,
                         AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS),
    ResourceType.CLUSTER: (AclOperation.CREATE, AclOperation.CLUSTER_ACTION,
                           AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
                           AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                           AclOperation.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE,
                                    AclOperation.TWO_PHASE_COMMIT),
    ResourceType.DELEGATION_TOKEN: (AclOperation.DESCRIBE,),
    ResourceType.USER: (AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS),
}  # fmt: skip


@dataclass(frozen=True, slots=True, order=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    def matches(self, resource_type: ResourceType, name: str) -> bool:
        """Whether this (specific) pattern covers the resource ``name`` of ``resource_type``."""
        if resource_type != self.resource_type:
            return False
        if self.pattern_type == PatternType.PREFIXED:
            return name.startswith(self.name)
        return self.name == name or self.name == WILDCARD


@dataclass(frozen=True, slots=True, order=True)
class AccessControlEntry:
    principal: str
    host: str
    operation: AclOperation
    permission: PermissionType


@dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """What DescribeAcls / DeleteAcls select: None (or ANY) fields match everything.

    ``pattern_type`` MATCH selects every pattern that would apply to the named resource (the
    LITERAL of that name, the LITERAL ``*``, the PREFIXED ones that are prefixes of it), as
    Kafka's ``ResourcePatternFilter`` does; ANY selects every pattern type whose stored name is
    the given name.
    """

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: PermissionType = PermissionType.ANY

    def matches(self, binding: AclBinding) -> bool:
        p, e = binding.pattern, binding.entry
        if self.resource_type != ResourceType.ANY and p.resource_type != self.resource_type:
            return False
        if self.pattern_type == PatternType.MATCH:
            if self.name is not None and not p.matches(p.resource_type, self.name):
                return False
        else:
            if self.pattern_type != PatternType.ANY and p.pattern_type != self.pattern_type:
                return False
            if self.name is not None and p.name != self.name:
                return False
        if self.principal is not None and e.principal != self.principal:
            return False
        if self.host is not None and e.host != self.host:
            return False
        if self.operation != AclOperation.ANY and e.operation != self.operation:
            return False
        return self.permission == PermissionType.ANY or e.permission == self.permission

    def problem(self) -> str | None:
        """Why Kafka would refuse this filter (its ``findIndefiniteField``), None if valid."""
        for value in (self.resource_type, self.pattern_type, self.operation, self.permission):
            if value.name == "UNKNOWN":
                return f"Filter contains UNKNOWN elements: {type(value).__name__}"
        return None


def split_principal(principal: str) -> tuple[str, str]:
    kind, sep, name = principal.partition(":")
    if not sep or not kind or not name:
        raise AclError(f"principal {principal!r} is not of the form <type>:<name>")
    return kind, name


def validate_binding(binding: AclBinding) -> None:
    """Raise :class:`AclError` for a binding Kafka refuses to store (module docstring)."""
    p, e = binding.pattern, binding.entry
    for value in (p.resource_type, p.pattern_type, e.operation, e.permission):
        if value.name in ("ANY", "UNKNOWN", "MATCH"):
            raise AclError(f"Invalid ACL: {type(value).__name__} {value.name} is not specific")
    if not p.name:
        raise AclError("Invalid ACL: the resource name is empty")
    split_principal(e.principal)
    if not e.host:
        raise AclError("Invalid ACL: the host is empty")
    if p.resource_type == ResourceType.CLUSTER and (
            p.name != CLUSTER_NAME or p.pattern_type != PatternType.LITERAL):  # fmt: skip
        raise AclError("The only valid name for the CLUSTER resource is kafka-cluster")


def check_operation_applies(binding: AclBinding) -> None:
    """kafka-acls' own check (the broker does not make it): the operation must be one that
    applies to the resource type, else the ACL would never grant anything."""
    p, e = binding.pattern, binding.entry
    if e.operation != AclOperation.ALL and e.operation not in SUPPORTED_OPERATIONS[p.resource_type]:
        raise AclError(f"Invalid ACL: operation {e.operation.name} does not apply to "
                       f"{p.resource_type.name}")  # fmt: skip
