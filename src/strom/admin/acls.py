"""ACLs as ``kafka-acls.sh`` manages them: bindings built from its options, and the
CreateAcls / DescribeAcls / DeleteAcls requests through confluent-kafka's AdminClient.

:class:`AclSpec` holds what the options say (principals allowed and denied, their hosts,
operations, resources, pattern type, the ``--producer`` / ``--consumer`` shortcuts);
:func:`bindings` expands it into Kafka's bindings as kafka-acls does:

- every (principal, host) of ``--allow-principal`` x ``--allow-host`` gets ALLOW, every one of
  ``--deny-principal`` x ``--deny-host`` DENY (hosts default to ``*``);
- ``--producer``: WRITE, DESCRIBE, CREATE on the topics; with ``--idempotent`` IDEMPOTENT_WRITE
  on the cluster; with ``--transactional-id`` WRITE and DESCRIBE on it;
- ``--consumer``: READ, DESCRIBE on the topics and READ on the groups (``--group`` required);
- otherwise each ``--operation`` (default ALL) on each resource, refused where kafka-acls
  refuses it (an operation that does not apply to the resource type).

A broker without an authorizer answers SECURITY_DISABLED: one line, as every other refusal.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import admin as ck

from strom.admin.errors import InvalidInputError, RefusedError
from strom.admin.session import Session
from strom.admin.wire import error_name, request
from strom.security.acl.model import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclBinding,
    AclError,
    AclOperation,
    PatternType,
    PermissionType,
    ResourcePattern,
    ResourceType,
    check_operation_applies,
    validate_binding,
)

DESCRIBE_ACLS = 29


@dataclass
class AclSpec:
    """What kafka-acls' options say (module docstring)."""

    allow_principals: list[str] = field(default_factory=list)
    deny_principals: list[str] = field(default_factory=list)
    allow_hosts: list[str] = field(default_factory=list)
    deny_hosts: list[str] = field(default_factory=list)
    operations: list[str] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)
    transactional_ids: list[str] = field(default_factory=list)
    cluster: bool = False
    pattern_type: str = "literal"
    producer: bool = False
    consumer: bool = False
    idempotent: bool = False

    def resources(self) -> list[tuple[ResourceType, str]]:
        out = [(ResourceType.TOPIC, t) for t in self.topics]
        out += [(ResourceType.GROUP, g) for g in self.groups]
        out += [(ResourceType.TRANSACTIONAL_ID, t) for t in self.transactional_ids]
        if self.cluster:
            out.append((ResourceType.CLUSTER, CLUSTER_NAME))
        return out


def _pattern(spec: AclSpec) -> PatternType:
    try:
        return PatternType.parse(spec.pattern_type)  # type: ignore[return-value]
    except AclError:
        raise InvalidInputError(f"--resource-pattern-type {spec.pattern_type!r}: use literal, "
                                "prefixed, match or any") from None  # fmt: skip


def _operation(name: str) -> AclOperation:
    try:
        op = AclOperation.parse(name)
    except AclError:
        known = ", ".join(o.camel for o in AclOperation if o > AclOperation.ANY)
        raise InvalidInputError(f"--operation {name!r} is not one of: {known}") from None
    return op  # type: ignore[return-value]


def _entries(spec: AclSpec) -> list[tuple[str, str, PermissionType]]:
    out = [(p, h, PermissionType.ALLOW) for p in spec.allow_principals
           for h in spec.allow_hosts or ["*"]]  # fmt: skip
    out += [(p, h, PermissionType.DENY) for p in spec.deny_principals
            for h in spec.deny_hosts or ["*"]]  # fmt: skip
    return out


def bindings(spec: AclSpec) -> list[AclBinding]:
    """The bindings ``create`` would make (module docstring); InvalidInputError for options
    kafka-acls refuses."""
    pattern_type = _pattern(spec)
    if pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise InvalidInputError("ACLs are created with --resource-pattern-type literal or prefixed")
    who = _entries(spec)
    if not who:
        raise InvalidInputError("give --allow-principal or --deny-principal")
    wanted: list[tuple[ResourceType, str, AclOperation]] = []
    if spec.producer or spec.consumer:
        if spec.operations:
            raise InvalidInputError("--operation cannot be combined with --producer/--consumer")
        if not spec.topics:
            raise InvalidInputError("--producer and --consumer need --topic")
        ops = ([AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE] if spec.producer
               else []) + ([AclOperation.READ, AclOperation.DESCRIBE] if spec.consumer else [])  # fmt: skip
        wanted += [(ResourceType.TOPIC, t, op) for t in spec.topics for op in dict.fromkeys(ops)]
        if spec.producer:
            wanted += [(ResourceType.TRANSACTIONAL_ID, t, op) for t in spec.transactional_ids
                       for op in (AclOperation.WRITE, AclOperation.DESCRIBE)]  # fmt: skip
            if spec.idempotent:
                wanted.append((ResourceType.CLUSTER, CLUSTER_NAME, AclOperation.IDEMPOTENT_WRITE))
        if spec.consumer:
            if not spec.groups:
                raise InvalidInputError("--consumer needs --group")
            wanted += [(ResourceType.GROUP, g, AclOperation.READ) for g in spec.groups]
    else:
        resources = spec.resources()
        if not resources:
            raise InvalidInputError("name a resource: --topic, --group, --transactional-id "
                                    "or --cluster")  # fmt: skip
        ops = [_operation(o) for o in spec.operations] or [AclOperation.ALL]
        wanted += [(rt, name, op) for rt, name in resources for op in ops]
    out = []
    for rt, name, op in wanted:
        pt = PatternType.LITERAL if rt == ResourceType.CLUSTER else pattern_type
        for principal, host, permission in who:
            binding = AclBinding(ResourcePattern(rt, name, pt),
                                 AccessControlEntry(principal, host, op, permission))  # fmt: skip
            try:
                validate_binding(binding)
                check_operation_applies(binding)
            except AclError as exc:
                raise InvalidInputError(str(exc)) from None
            out.append(binding)
    return sorted(set(out))


@dataclass(frozen=True)
class AclBindingFilterArgs:
    resource_type: ResourceType
    name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: AclOperation
    permission: str = "ANY"


def filters(spec: AclSpec, principal: str | None = None) -> list[AclBindingFilterArgs]:
    """The filters ``list`` / ``delete`` use: one per named resource (every resource when none
    is named), narrowed by principals, hosts and operations when given."""
    pattern_type = _pattern(spec)
    resources: list[tuple[ResourceType, str | None]] = list(spec.resources()) or [
        (ResourceType.ANY, None)]
    principals: list[str | None] = [*spec.allow_principals, *spec.deny_principals] or [principal]
    ops = [_operation(o) for o in spec.operations] or [AclOperation.ANY]
    out = []
    for rt, name in resources:
        pt = PatternType.LITERAL if rt == ResourceType.CLUSTER else pattern_type
        if name is None:
            pt = PatternType.ANY
        for who in principals:
            for op in ops:
                out.append(AclBindingFilterArgs(rt, name, pt, who, None, op))
    return out


@dataclass(frozen=True, order=True)
class AclRow:
    """One ACL as listed (kafka-acls' fields)."""

    resource_type: str
    name: str
    pattern_type: str
    principal: str
    host: str
    operation: str
    permission: str


def _to_ck(binding: AclBinding) -> ck.AclBinding:
    p, e = binding.pattern, binding.entry
    if e.operation.name not in ck.AclOperation.__members__:
        raise InvalidInputError(f"operation {e.operation.name} is not supported by the client "
                                "library")  # fmt: skip
    return ck.AclBinding(_ck_type(p.resource_type), p.name, ck.ResourcePatternType[p.pattern_type.name],
                         e.principal, e.host, ck.AclOperation[e.operation.name],
                         ck.AclPermissionType[e.permission.name])  # fmt: skip


def _ck_type(rt: ResourceType) -> Any:
    return ck.ResourceType.BROKER if rt == ResourceType.CLUSTER else ck.ResourceType[rt.name]


def _filter_to_ck(f: AclBindingFilterArgs) -> ck.AclBindingFilter:
    # None (any name, principal, host) is what librdkafka takes for "match all"; its stubs say str
    name: Any = f.name
    principal: Any = f.principal
    host: Any = f.host
    return ck.AclBindingFilter(_ck_type(f.resource_type), name,
                               ck.ResourcePatternType[f.pattern_type.name], principal, host,
                               ck.AclOperation[f.operation.name],
                               ck.AclPermissionType[f.permission.upper()])  # fmt: skip


def exact_filter(row: AclRow) -> AclBindingFilterArgs:
    """The filter that selects exactly the ACL ``row`` lists (a console's delete button)."""
    try:
        rt = ResourceType.parse(row.resource_type)
        pt = PatternType.parse(row.pattern_type)
        op = AclOperation.parse(row.operation)
        PermissionType.parse(row.permission)
    except AclError as exc:
        raise InvalidInputError(str(exc)) from None
    return AclBindingFilterArgs(rt, row.name, pt, row.principal, row.host, op,  # type: ignore[arg-type]
                                row.permission)


def _row(b: Any) -> AclRow:
    rt = "CLUSTER" if b.restype.name == "BROKER" else b.restype.name
    return AclRow(rt, b.name, b.resource_pattern_type.name, b.principal, b.host,
                  b.operation.name, b.permission_type.name)  # fmt: skip


def create(session: Session, made: Sequence[AclBinding]) -> list[AclRow]:
    """Store the bindings; the rows created (RefusedError names the first refusal)."""
    futures = session.guarded("create ACLs", lambda: session.admin.create_acls(
        [_to_ck(b) for b in made]))  # fmt: skip
    for future in futures.values():
        session.wait(future, "create ACLs")
    return [_row(_to_ck(b)) for b in made]


def describe(session: Session, wanted: Iterable[AclBindingFilterArgs]) -> list[AclRow]:
    """The ACLs the filters select. Asked with strom's own codec, not librdkafka: librdkafka
    drops DescribeAcls' error code (a broker without an authorizer, or a principal refused,
    would read as "no ACLs"), where kafka-acls reports it."""
    rows: set[AclRow] = set()
    for f in wanted:
        resp = request(session.bootstrap, DESCRIBE_ACLS, 3, wait_s=session.timeout,
                       resource_type_filter=int(f.resource_type), resource_name_filter=f.name,
                       pattern_type_filter=int(f.pattern_type), principal_filter=f.principal,
                       host_filter=f.host, operation=int(f.operation),
                       permission_type=int(PermissionType.ANY))  # fmt: skip
        if resp.error_code:
            raise RefusedError(f"list ACLs: {resp.error_message or error_name(resp.error_code)} "
                               f"({error_name(resp.error_code)})")  # fmt: skip
        for r in resp.resources:
            rt = ResourceType(int(r.resource_type))
            for a in r.acls:
                rows.add(AclRow(rt.name, r.resource_name, PatternType(int(r.pattern_type)).name,
                                a.principal, a.host, AclOperation(int(a.operation)).name,
                                PermissionType(int(a.permission_type)).name))  # fmt: skip
    return sorted(rows)


def delete(session: Session, wanted: Sequence[AclBindingFilterArgs]) -> list[AclRow]:
    """Remove what the filters select; the rows removed."""
    futures = session.guarded("delete ACLs", lambda: session.admin.delete_acls(
        [_filter_to_ck(f) for f in wanted]))  # fmt: skip
    rows: set[AclRow] = set()
    for future in futures.values():
        rows.update(_row(b) for b in session.wait(future, "delete ACLs"))
    return sorted(rows)
