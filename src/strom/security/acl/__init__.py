"""Authorization: Kafka's ACL model (:mod:`.model`), the authorizer's decisions
(:mod:`.authorizer`), and the ACLs' home in the metadata store (:mod:`.codec`, :mod:`.store`).

:func:`authorizer_from_config` reads Kafka's broker properties: ``authorizer.class.name``
(empty: no authorizer, every request allowed; Kafka's ``StandardAuthorizer`` or
``AclAuthorizer`` class name: ACLs enforced), ``super.users`` (``User:a;User:b``) and
``allow.everyone.if.no.acl.found``.
"""

from __future__ import annotations

from strom.security.acl.authorizer import AUTHORIZER_CLASSES, Authorizer
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
)

__all__ = [
    "AUTHORIZER_CLASSES", "AccessControlEntry", "AclBinding", "AclBindingFilter", "AclError",
    "AclOperation", "Authorizer", "PatternType", "PermissionType", "ResourcePattern",
    "ResourceType", "authorizer_from_config",
]  # fmt: skip


def authorizer_from_config(class_name: str | None, super_users: str | None,
                           allow_everyone: str | None) -> Authorizer | None:  # fmt: skip
    """The authorizer the three properties ask for (None: authorization off); AclError names
    the property whose value is not usable."""
    class_name = (class_name or "").strip()
    if not class_name:
        return None
    if class_name not in AUTHORIZER_CLASSES:
        raise AclError(f"authorizer.class.name={class_name!r} is not supported: use "
                       "org.apache.kafka.metadata.authorizer.StandardAuthorizer or "
                       "kafka.security.authorizer.AclAuthorizer")  # fmt: skip
    users = [u.strip() for u in (super_users or "").split(";") if u.strip()]
    for user in users:
        if ":" not in user:
            raise AclError(f"super.users: {user!r} is not a principal (User:NAME)")
    flag = (allow_everyone or "false").strip().lower()
    if flag not in ("true", "false"):
        raise AclError(f"allow.everyone.if.no.acl.found={allow_everyone!r} is not true or false")
    return Authorizer(users, flag == "true")
