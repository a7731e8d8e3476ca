"""The authorizer's decisions against Kafka's documented StandardAuthorizer semantics."""

from __future__ import annotations

import pytest

from strom.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclError,
    AclOperation,
    Authorizer,
    PatternType,
    PermissionType,
    ResourcePattern,
    ResourceType,
    authorizer_from_config,
)
from strom.security.acl.model import check_operation_applies, validate_binding

T, G, C, TX = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = PermissionType.ALLOW, PermissionType.DENY
Op = AclOperation
ALICE, BOB = "User:alice", "User:bob"


def acl(a: Authorizer, rt: ResourceType, name: str, pt: PatternType, principal: str,
        op: AclOperation, perm: PermissionType = ALLOW, host: str = "*") -> None:  # fmt: skip
    pattern = ResourcePattern(rt, name, pt)
    a.set_acls(pattern, a.entries(pattern) | {AccessControlEntry(principal, host, op, perm)})


def ok(a: Authorizer, principal: str, op: AclOperation, rt: ResourceType, name: str,
       host: str = "10.0.0.1") -> bool:  # fmt: skip
    return a.authorize(principal, host, op, rt, name)


def test_no_acl_denies_unless_allow_everyone() -> None:
    assert not ok(Authorizer(), ALICE, Op.READ, T, "t")
    assert ok(Authorizer(allow_everyone_if_no_acl=True), ALICE, Op.READ, T, "t")


def test_allow_everyone_applies_only_where_no_acl_names_the_resource() -> None:
    a = Authorizer(allow_everyone_if_no_acl=True)
    acl(a, T, "t", LIT, BOB, Op.READ)
    assert not ok(a, ALICE, Op.READ, T, "t")  # an ACL on t exists (for bob): alice is denied
    assert ok(a, ALICE, Op.READ, T, "other")


def test_super_users_bypass_deny() -> None:
    a = Authorizer(super_users=[ALICE])
    acl(a, T, "*", LIT, ALICE, Op.ALL, DENY)
    assert ok(a, ALICE, Op.WRITE, T, "t")
    assert not ok(a, BOB, Op.WRITE, T, "t")


def test_literal_prefixed_and_wildcard_patterns() -> None:
    a = Authorizer()
    acl(a, T, "pay", PRE, ALICE, Op.READ)
    acl(a, T, "exact", LIT, ALICE, Op.WRITE)
    acl(a, G, "*", LIT, ALICE, Op.READ)
    assert ok(a, ALICE, Op.READ, T, "payments") and ok(a, ALICE, Op.READ, T, "pay")
    assert not ok(a, ALICE, Op.READ, T, "pa")
    assert ok(a, ALICE, Op.WRITE, T, "exact") and not ok(a, ALICE, Op.WRITE, T, "exactly")
    assert ok(a, ALICE, Op.READ, G, "any-group")
    assert not ok(a, ALICE, Op.READ, T, "any-topic")  # the wildcard is per resource type


def test_deny_wins_over_allow_from_any_pattern() -> None:
    a = Authorizer()
    acl(a, T, "*", LIT, "User:*", Op.READ)
    acl(a, T, "secret", PRE, ALICE, Op.READ, DENY)
    assert not ok(a, ALICE, Op.READ, T, "secret-1")
    assert ok(a, BOB, Op.READ, T, "secret-1")
    assert ok(a, ALICE, Op.READ, T, "public")


def test_implied_operations_only_for_allow() -> None:
    a = Authorizer()
    for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
        acl(a, T, f"t-{op.name}", LIT, ALICE, op)
        assert ok(a, ALICE, Op.DESCRIBE, T, f"t-{op.name}")
    acl(a, T, "cfg", LIT, ALICE, Op.ALTER_CONFIGS)
    assert ok(a, ALICE, Op.DESCRIBE_CONFIGS, T, "cfg")
    assert not ok(a, ALICE, Op.DESCRIBE, T, "cfg")  # ALTER_CONFIGS implies DESCRIBE_CONFIGS only
    assert not ok(a, ALICE, Op.READ, T, "t-WRITE")  # WRITE does not imply READ
    # DENY implies nothing: DENY READ keeps an ALLOW DESCRIBE
    acl(a, T, "d", LIT, ALICE, Op.DESCRIBE)
    acl(a, T, "d", LIT, ALICE, Op.READ, DENY)
    assert ok(a, ALICE, Op.DESCRIBE, T, "d") and not ok(a, ALICE, Op.READ, T, "d")
    # ALL grants (and denies) every operation
    acl(a, T, "all", LIT, ALICE, Op.ALL)
    assert all(ok(a, ALICE, op, T, "all") for op in (Op.READ, Op.WRITE, Op.ALTER_CONFIGS))
    acl(a, T, "all", LIT, ALICE, Op.ALL, DENY)
    assert not ok(a, ALICE, Op.DESCRIBE, T, "all")


def test_principal_and_host_matching() -> None:
    a = Authorizer()
    acl(a, T, "t", LIT, "User:*", Op.READ, host="10.0.0.1")
    assert ok(a, ALICE, Op.READ, T, "t", host="10.0.0.1")
    assert not ok(a, ALICE, Op.READ, T, "t", host="10.0.0.2")
    acl(a, T, "t", LIT, BOB, Op.READ, DENY, host="10.0.0.1")
    assert not ok(a, BOB, Op.READ, T, "t", host="10.0.0.1")


def test_decisions_follow_changes() -> None:
    a = Authorizer()
    assert not ok(a, ALICE, Op.READ, T, "t")  # cached as denied ...
    acl(a, T, "t", LIT, ALICE, Op.READ)
    assert ok(a, ALICE, Op.READ, T, "t")  # ... and the change clears the cache
    a.set_acls(ResourcePattern(T, "t", LIT), ())
    assert not ok(a, ALICE, Op.READ, T, "t")
    assert a.bindings() == []


def test_authorize_any_by_resource_type() -> None:
    a = Authorizer()
    assert not a.authorize_any(ALICE, "h", Op.WRITE, T)
    acl(a, T, "pay", PRE, ALICE, Op.WRITE)
    assert a.authorize_any(ALICE, "h", Op.WRITE, T)
    acl(a, T, "p", PRE, ALICE, Op.WRITE, DENY)  # a broader DENY cancels the ALLOW
    assert not a.authorize_any(ALICE, "h", Op.WRITE, T)
    b = Authorizer()
    acl(b, T, "x", LIT, ALICE, Op.WRITE)
    acl(b, T, "*", LIT, ALICE, Op.WRITE, DENY)
    assert not b.authorize_any(ALICE, "h", Op.WRITE, T)
    assert Authorizer(super_users=[ALICE]).authorize_any(ALICE, "h", Op.WRITE, T)


def test_authorized_operations_bits() -> None:
    a = Authorizer()
    acl(a, T, "t", LIT, ALICE, Op.READ)
    bits = a.authorized_operations(ALICE, "h", T, "t")
    assert bits == (1 << Op.READ) | (1 << Op.DESCRIBE)
    assert a.authorized_operations(BOB, "h", T, "t") == 0


def test_filters() -> None:
    a = Authorizer()
    acl(a, T, "pay", PRE, ALICE, Op.READ)
    acl(a, T, "payments", LIT, BOB, Op.WRITE)
    acl(a, T, "*", LIT, BOB, Op.DESCRIBE)
    acl(a, G, "g", LIT, ALICE, Op.READ)
    assert len(a.bindings(AclBindingFilter())) == 4
    match = a.bindings(AclBindingFilter(T, "payments", PatternType.MATCH))
    assert {b.pattern.name for b in match} == {"pay", "payments", "*"}
    assert [b.pattern.name for b in a.bindings(AclBindingFilter(T, "pay", PatternType.ANY))] == ["pay"]
    assert [b.entry.principal for b in a.bindings(AclBindingFilter(principal=BOB, operation=Op.WRITE))] == [BOB]
    assert AclBindingFilter(operation=Op.UNKNOWN).problem()


def test_validation() -> None:
    good = AclBinding(ResourcePattern(C, "kafka-cluster", LIT),
                      AccessControlEntry(ALICE, "*", Op.ALTER, ALLOW))  # fmt: skip
    validate_binding(good)
    for bad in (
        AclBinding(ResourcePattern(C, "other", LIT), good.entry),
        AclBinding(ResourcePattern(T, "t", PatternType.ANY), good.entry),
        AclBinding(ResourcePattern(T, "t", LIT), AccessControlEntry("alice", "*", Op.READ, ALLOW)),
        AclBinding(ResourcePattern(T, "t", LIT), AccessControlEntry(ALICE, "*", Op.ANY, ALLOW)),
    ):
        with pytest.raises(AclError):
            validate_binding(bad)
    with pytest.raises(AclError):
        check_operation_applies(AclBinding(ResourcePattern(G, "g", LIT),
                                           AccessControlEntry(ALICE, "*", Op.WRITE, ALLOW)))  # fmt: skip


def test_config() -> None:
    assert authorizer_from_config("", None, None) is None
    a = authorizer_from_config("kafka.security.authorizer.AclAuthorizer", "User:a; User:b", "true")
    assert a is not None and a.super_users == {"User:a", "User:b"} and a.allow_everyone_if_no_acl
    assert authorizer_from_config("org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                                  None, None) is not None  # fmt: skip
    with pytest.raises(AclError):
        authorizer_from_config("com.example.Mine", None, None)
    with pytest.raises(AclError):
        authorizer_from_config("kafka.security.authorizer.AclAuthorizer", None, "maybe")
