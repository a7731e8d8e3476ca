"""DescribeAcls (key 29): the ACLs a filter selects, grouped by resource pattern.

CLUSTER DESCRIBE is required (CLUSTER_AUTHORIZATION_FAILED); without an authorizer the answer
is SECURITY_DISABLED, as Kafka's. A filter with an UNKNOWN element is INVALID_REQUEST.
"""

from __future__ import annotations

from typing import Any

from strom.broker import authz, dispatch
from strom.broker.acl_requests import read_filter
from strom.broker.context import RequestContext
from strom.protocol.errors import ErrorCode
from strom.security.acl.model import AclError, ResourcePattern

API_KEY = 29


@dispatch.handler(API_KEY, 1, 3)
def handle(ctx: RequestContext, request: Any) -> Any:
    def failed(code: ErrorCode, message: str) -> Any:
        return ctx.respond(throttle_time=0, error_code=code, error_message=message, resources=())

    authorizer = ctx.services.authorizer
    if authorizer is None:
        return failed(ErrorCode.security_disabled, "No Authorizer is configured on the broker")
    if not authz.authorize_cluster(ctx, authz.DESCRIBE):
        return failed(ErrorCode.cluster_authorization_failed,
                      "not authorized to DESCRIBE the cluster's ACLs")  # fmt: skip
    try:
        selector = read_filter(request)
    except AclError as exc:
        return failed(ErrorCode.invalid_request, str(exc))
    grouped: dict[ResourcePattern, list[Any]] = {}
    for binding in authorizer.bindings(selector):
        e = binding.entry
        grouped.setdefault(binding.pattern, []).append(ctx.make(
            "AclDescription", principal=e.principal, host=e.host, operation=int(e.operation),
            permission_type=int(e.permission)))  # fmt: skip
    resources = tuple(ctx.make("DescribeAclsResource", resource_type=int(p.resource_type),
                               resource_name=p.name, pattern_type=int(p.pattern_type),
                               acls=tuple(acls))
                      for p, acls in grouped.items())  # fmt: skip
    return ctx.respond(throttle_time=0, error_code=0, error_message=None, resources=resources)
