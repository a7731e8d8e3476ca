"""The authorizer: Kafka's ``StandardAuthorizer`` decisions over an in-memory set of ACLs.

A decision for (principal, host, operation, resource):

1. a principal in ``super.users`` is allowed everything;
2. the ACLs that apply are those whose pattern covers the resource (the LITERAL of its name,
   the LITERAL ``*``, every PREFIXED pattern that is a prefix of the name), whose principal is
   the requester's or ``User:*``, and whose host is the requester's or ``*``;
3. any applying DENY for the operation (or ALL) denies — DENY implies nothing, so DENY READ
   does not deny DESCRIBE;
4. else any applying ALLOW for the operation, for ALL, or for an operation that implies it
   (READ / WRITE / DELETE / ALTER imply DESCRIBE, ALTER_CONFIGS implies DESCRIBE_CONFIGS)
   allows;
5. else, when no ACL at all covers the resource (whoever it names), the answer is
   ``allow.everyone.if.no.acl.found`` (default false); otherwise denied.

:meth:`Authorizer.authorize_any` is Kafka's ``authorizeByResourceType`` (KIP-679: may the
principal do the operation on *some* resource of the type, used for idempotent producers
without IDEMPOTENT_WRITE), and :meth:`Authorizer.authorized_operations` KIP-430's bit field.

The ACLs are replaced per resource pattern by the store's watcher
(:mod:`strom.security.acl.store`); every change clears the decision cache, which is what keeps
an allowed Produce cheap (one dict lookup per topic once decided).
"""

from __future__ import annotations

from collections.abc import Iterable

from strom.security.acl.model import (
    IMPLIES_DESCRIBE,
    IMPLIES_DESCRIBE_CONFIGS,
    SUPPORTED_OPERATIONS,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    PatternType,
    PermissionType,
    ResourcePattern,
    ResourceType,
)

#: Kafka's class names accepted for ``authorizer.class.name`` (both behave as StandardAuthorizer)
AUTHORIZER_CLASSES = frozenset({
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.authorizer.AclAuthorizer",
    "kafka.security.auth.SimpleAclAuthorizer",
})  # fmt: skip
_CACHE_MAX = 100_000  # decisions kept between ACL changes (a plain dict, cleared when full)
_DENY, _ALLOW = PermissionType.DENY, PermissionType.ALLOW


def _grants(entry: AccessControlEntry, operation: AclOperation) -> bool:
    """Whether ``entry`` (already matched on principal and host) speaks of ``operation``."""
    op = entry.operation
    if op == AclOperation.ALL or op == operation:
        return True
    if entry.permission != _ALLOW:
        return False  # DENY implies nothing
    if operation == AclOperation.DESCRIBE:
        return op in IMPLIES_DESCRIBE
    if operation == AclOperation.DESCRIBE_CONFIGS:
        return op in IMPLIES_DESCRIBE_CONFIGS
    return False


class Authorizer:
    """ACL decisions (module docstring). ``super_users``: principals as ``User:NAME``."""

    def __init__(self, super_users: Iterable[str] = (), allow_everyone_if_no_acl: bool = False) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl = allow_everyone_if_no_acl
        #: resource type -> pattern type -> resource name -> entries
        self._acls: dict[ResourceType, dict[PatternType, dict[str, frozenset[AccessControlEntry]]]] = {}
        self._cache: dict[tuple[str, str, int, int, str], bool] = {}
        self.generation = 0  # + 1 at every change (tests and the console see it move)

    # --- the ACLs ------------------------------------------------------------------------
    def set_acls(self, pattern: ResourcePattern, entries: Iterable[AccessControlEntry]) -> None:
        """Replace the ACLs of one resource pattern (none: the pattern is gone)."""
        by_name = self._acls.setdefault(pattern.resource_type, {}).setdefault(pattern.pattern_type, {})
        entries = frozenset(entries)
        if entries:
            by_name[pattern.name] = entries
        else:
            by_name.pop(pattern.name, None)
        self._changed()

    def replace_all(self, bindings: Iterable[AclBinding]) -> None:
        acls: dict[ResourceType, dict[PatternType, dict[str, set[AccessControlEntry]]]] = {}
        for b in bindings:
            p = b.pattern
            acls.setdefault(p.resource_type, {}).setdefault(p.pattern_type, {}).setdefault(
                p.name, set()).add(b.entry)  # fmt: skip
        self._acls = {rt: {pt: {name: frozenset(e) for name, e in names.items()}
                           for pt, names in pts.items()} for rt, pts in acls.items()}  # fmt: skip
        self._changed()

    def _changed(self) -> None:
        self._cache = {}
        self.generation += 1

    def bindings(self, selector: AclBindingFilter | None = None) -> list[AclBinding]:
        """Every ACL (those ``selector`` matches), sorted."""
        out = []
        for rt, pts in self._acls.items():
            for pt, names in pts.items():
                for name, entries in names.items():
                    pattern = ResourcePattern(rt, name, pt)
                    for entry in entries:
                        binding = AclBinding(pattern, entry)
                        if selector is None or selector.matches(binding):
                            out.append(binding)
        return sorted(out)

    def entries(self, pattern: ResourcePattern) -> frozenset[AccessControlEntry]:
        return self._acls.get(pattern.resource_type, {}).get(pattern.pattern_type, {}).get(
            pattern.name, frozenset())  # fmt: skip

    # --- decisions -----------------------------------------------------------------------
    def authorize(self, principal: str, host: str, operation: AclOperation,
                  resource_type: ResourceType, name: str) -> bool:  # fmt: skip
        key = (principal, host, operation, resource_type, name)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        allowed = self._decide(principal, host, operation, resource_type, name)
        if len(self._cache) >= _CACHE_MAX:
            self._cache = {}
        self._cache[key] = allowed
        return allowed

    def _applying(self, resource_type: ResourceType, name: str) -> list[frozenset[AccessControlEntry]]:
        """The entry sets of every pattern covering the resource (step 2's patterns)."""
        pts = self._acls.get(resource_type)
        if not pts:
            return []
        found = []
        literal = pts.get(PatternType.LITERAL)
        if literal:
            for key in (name, WILDCARD) if name != WILDCARD else (name,):
                entries = literal.get(key)
                if entries:
                    found.append(entries)
        prefixed = pts.get(PatternType.PREFIXED)
        if prefixed:
            if len(prefixed) < len(name):
                found.extend(e for prefix, e in prefixed.items() if name.startswith(prefix))
            else:
                found.extend(e for e in map(prefixed.get, (name[:i] for i in range(1, len(name) + 1)))
                             if e)  # fmt: skip
        return found

    def _decide(self, principal: str, host: str, operation: AclOperation,
                resource_type: ResourceType, name: str) -> bool:  # fmt: skip
        if principal in self.super_users:
            return True
        sets = self._applying(resource_type, name)
        if not sets:
            return self.allow_everyone_if_no_acl
        allowed = False
        for entries in sets:
            for e in entries:
                if (e.principal != principal and e.principal != WILDCARD_PRINCIPAL) or (
                        e.host != WILDCARD and e.host != host):  # fmt: skip
                    continue
                if _grants(e, operation):
                    if e.permission == _DENY:
                        return False
                    allowed = True
        return allowed

    def authorize_any(self, principal: str, host: str, operation: AclOperation,
                      resource_type: ResourceType) -> bool:  # fmt: skip
        """Kafka's ``authorizeByResourceType``: allowed when some resource of the type would be
        allowed — an ALLOW (LITERAL or PREFIXED) for the principal that no DENY of the same or a
        broader pattern cancels; a DENY of LITERAL ``*`` denies all. Super users, and
        ``allow.everyone.if.no.acl.found`` with no ACL on a resource nobody names, are allowed
        (Kafka asks the authorizer about a made-up resource name first)."""
        if self.authorize(principal, host, operation, resource_type, "\0hardcode"):
            return True
        allow: dict[PatternType, set[str]] = {PatternType.LITERAL: set(), PatternType.PREFIXED: set()}
        deny: dict[PatternType, set[str]] = {PatternType.LITERAL: set(), PatternType.PREFIXED: set()}
        for pt, names in self._acls.get(resource_type, {}).items():
            for name, entries in names.items():
                for e in entries:
                    if (e.principal not in (principal, WILDCARD_PRINCIPAL)
                            or e.host not in (host, WILDCARD)
                            or e.operation not in (operation, AclOperation.ALL)):  # fmt: skip
                        continue
                    (deny if e.permission == _DENY else allow)[pt].add(name)
        if WILDCARD in deny[PatternType.LITERAL]:
            return False
        for name in allow[PatternType.LITERAL]:
            if name == WILDCARD or (name not in deny[PatternType.LITERAL] and not any(
                    name.startswith(d) for d in deny[PatternType.PREFIXED])):  # fmt: skip
                return True
        return any(not any(name.startswith(d) for d in deny[PatternType.PREFIXED])
                   for name in allow[PatternType.PREFIXED])  # fmt: skip

    def authorized_operations(self, principal: str, host: str, resource_type: ResourceType,
                              name: str) -> int:  # fmt: skip
        """KIP-430: the bit field (bit = operation code) of the operations allowed on the
        resource, among those that apply to its type."""
        bits = 0
        for op in SUPPORTED_OPERATIONS[resource_type]:
            if self.authorize(principal, host, op, resource_type, name):
                bits |= 1 << op
        return bits
