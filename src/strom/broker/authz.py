"""The handlers' side of authorization: Kafka's ``AuthHelper`` over the context's principal.

Every helper is true when the broker has no authorizer (``authorizer.class.name`` empty): one
attribute test, so an unsecured broker's hot paths pay nothing else; and for the broker's own
requests delivered in-process (a :class:`~strom.broker.context.Client` with a negative
connection id: the controller's commands to its own broker), which no ACL can name. With an authorizer, the
decision is :class:`~strom.security.acl.authorizer.Authorizer`'s for the request's principal and
its connection's host.

Kafka's rules that the handlers follow, in one place:

- a topic the principal may not DESCRIBE is answered as if it did not exist wherever naming it
  would leak its existence (Metadata lists drop it; a named one is TOPIC_AUTHORIZATION_FAILED
  whether it exists or not); an operation refused on a topic is TOPIC_AUTHORIZATION_FAILED,
  on a group GROUP_AUTHORIZATION_FAILED, on a transactional id
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED, on the cluster CLUSTER_AUTHORIZATION_FAILED;
- :func:`authorized_operations` is KIP-430's bit field (``-2**31`` when not asked for).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from strom.protocol.errors import ErrorCode, KafkaError
from strom.security.acl.model import CLUSTER_NAME, SUPPORTED_OPERATIONS, AclOperation, ResourceType

if TYPE_CHECKING:
    from strom.broker.context import RequestContext

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
TRANSACTIONAL_ID = ResourceType.TRANSACTIONAL_ID
READ, WRITE, CREATE, DELETE = AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DELETE
ALTER, DESCRIBE, CLUSTER_ACTION = AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.CLUSTER_ACTION
DESCRIBE_CONFIGS, ALTER_CONFIGS = AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS
IDEMPOTENT_WRITE = AclOperation.IDEMPOTENT_WRITE
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)

#: the error a refused operation on each resource type is answered with
DENIED_CODE = {
    TOPIC: ErrorCode.topic_authorization_failed,
    GROUP: ErrorCode.group_authorization_failed,
    CLUSTER: ErrorCode.cluster_authorization_failed,
    TRANSACTIONAL_ID: ErrorCode.transactional_id_authorization_failed,
    ResourceType.DELEGATION_TOKEN: ErrorCode.delegation_token_authorization_failed,
    ResourceType.USER: ErrorCode.cluster_authorization_failed,
}


def authorize(ctx: RequestContext, op: AclOperation, resource_type: ResourceType, name: str) -> bool:
    authorizer = ctx.services.authorizer
    if authorizer is None:
        return True
    client = ctx.client
    if client.connection_id < 0:
        return True  # the broker itself (the controller's requests delivered in-process)
    return authorizer.authorize(client.principal, client.host, op, resource_type, name)


def authorize_cluster(ctx: RequestContext, op: AclOperation) -> bool:
    return authorize(ctx, op, CLUSTER, CLUSTER_NAME)


def authorize_any(ctx: RequestContext, op: AclOperation, resource_type: ResourceType) -> bool:
    """KIP-679's ``authorizeByResourceType`` (idempotent producers without IDEMPOTENT_WRITE)."""
    authorizer = ctx.services.authorizer
    if authorizer is None or ctx.client.connection_id < 0:
        return True
    return authorizer.authorize_any(ctx.client.principal, ctx.client.host, op, resource_type)


def require(ctx: RequestContext, op: AclOperation, resource_type: ResourceType, name: str) -> None:
    """Raise the resource type's authorization error unless allowed."""
    if not authorize(ctx, op, resource_type, name):
        raise KafkaError(DENIED_CODE[resource_type],
                         f"not authorized to {op.name} {resource_type.name} {name}")  # fmt: skip


def require_cluster(ctx: RequestContext, op: AclOperation) -> None:
    require(ctx, op, CLUSTER, CLUSTER_NAME)


def allowed_names(ctx: RequestContext, op: AclOperation, resource_type: ResourceType,
                  names: Iterable[str]) -> set[str]:  # fmt: skip
    """The names (of ``names``) the principal may do ``op`` on."""
    if ctx.services.authorizer is None:
        return set(names)
    return {n for n in names if authorize(ctx, op, resource_type, n)}


def authorized_operations(ctx: RequestContext, resource_type: ResourceType, name: str,
                          asked: bool = True) -> int:  # fmt: skip
    """KIP-430: the operations the principal may do on the resource, as a bit field; omitted
    (``-2**31``) when not asked; 0 when the principal may not DESCRIBE it (Kafka's rule for the
    cluster's; topics and groups it may not describe are not answered at all). Without an
    authorizer every operation of the type is allowed."""
    if not asked:
        return AUTHORIZED_OPERATIONS_OMITTED
    authorizer = ctx.services.authorizer
    if authorizer is None or ctx.client.connection_id < 0:
        return sum(1 << op for op in SUPPORTED_OPERATIONS[resource_type])
    if not authorizer.authorize(ctx.client.principal, ctx.client.host, DESCRIBE, resource_type,
                                name):  # fmt: skip
        return 0
    return authorizer.authorized_operations(ctx.client.principal, ctx.client.host,
                                            resource_type, name)  # fmt: skip


#: config resource types (DescribeConfigs / AlterConfigs) -> the ACL resource type they are
#: authorized on: a topic's own ACLs, a group's, the cluster for brokers, loggers and the rest
CONFIG_RESOURCE_TYPES = {2: TOPIC, 32: GROUP}


def require_config(ctx: RequestContext, op: AclOperation, config_type: int, name: str) -> None:
    """DESCRIBE_CONFIGS / ALTER_CONFIGS on a config resource (Kafka's rule: a topic or a group on
    itself, a broker, a broker logger or client metrics on the cluster)."""
    resource_type = CONFIG_RESOURCE_TYPES.get(config_type, CLUSTER)
    require(ctx, op, resource_type, name if resource_type != CLUSTER else CLUSTER_NAME)


def denied_topic_ids(ctx: RequestContext, op: AclOperation, topic_ids: Iterable[Any]) -> set[Any]:
    """The ids (of ``topic_ids``) of existing topics the principal may not do ``op`` on; ids no
    topic has are left to the handler (UNKNOWN_TOPIC_ID)."""
    if ctx.services.authorizer is None:
        return set()
    denied = set()
    for topic_id in set(topic_ids):
        info = ctx.topics.by_id(topic_id)
        if info is not None and not authorize(ctx, op, TOPIC, info.name):
            denied.add(topic_id)
    return denied
