"""What the three ACL APIs read from their requests: filters and bindings in strom's model.

DescribeAcls / DeleteAcls filters and CreateAcls
creations, with Kafka's validation (:mod:`strom.security.acl.model`), raising
:class:`~strom.security.acl.model.AclError` for what Kafka answers INVALID_REQUEST.
"""

from __future__ import annotations

from typing import Any

from strom.security.acl.model import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclError,
    AclOperation,
    PatternType,
    PermissionType,
    ResourcePattern,
    ResourceType,
    validate_binding,
)


def _enum(cls: Any, value: int) -> Any:
    try:
        return cls(int(value))
    except ValueError:
        return cls(0)  # UNKNOWN, refused below


def read_filter(item: Any) -> AclBindingFilter:
    """A DescribeAcls request or a DeleteAcls filter (same field names)."""
    selector = AclBindingFilter(
        resource_type=_enum(ResourceType, item.resource_type_filter),
        name=item.resource_name_filter,
        pattern_type=_enum(PatternType, getattr(item, "pattern_type_filter", PatternType.LITERAL)),
        principal=item.principal_filter,
        host=item.host_filter,
        operation=_enum(AclOperation, item.operation),
        permission=_enum(PermissionType, item.permission_type),
    )
    problem = selector.problem()
    if problem:
        raise AclError(problem)
    return selector


def read_creation(item: Any) -> AclBinding:
    binding = AclBinding(
        ResourcePattern(_enum(ResourceType, item.resource_type), item.resource_name,
                        _enum(PatternType, item.resource_pattern_type)),
        AccessControlEntry(item.principal, item.host, _enum(AclOperation, item.operation),
                           _enum(PermissionType, item.permission_type)),
    )  # fmt: skip
    validate_binding(binding)
    return binding
