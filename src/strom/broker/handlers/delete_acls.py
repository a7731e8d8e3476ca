"""DeleteAcls (key 31): remove the ACLs each filter selects, reporting what each removed.

CLUSTER ALTER is required (every filter CLUSTER_AUTHORIZATION_FAILED); without an authorizer
every filter is SECURITY_DISABLED. A filter with an UNKNOWN element is INVALID_REQUEST and
removes nothing. The removals apply on every broker (:mod:`strom.security.acl.store`).
"""

from __future__ import annotations

import logging
from typing import Any

from strom.broker import authz, dispatch
from strom.broker.acl_requests import read_filter
from strom.broker.context import RequestContext
from strom.metadata.store import StoreError
from strom.protocol.errors import ErrorCode
from strom.security.acl.model import AclBindingFilter, AclError

API_KEY = 31
log = logging.getLogger(__name__)


@dispatch.handler(API_KEY, 1, 3)
async def handle(ctx: RequestContext, request: Any) -> Any:
    def failed(code: ErrorCode, message: str) -> Any:
        return ctx.make("DeleteAclsFilterResult", error_code=code, error_message=message,
                        matching_acls=())  # fmt: skip

    acls = ctx.services.acls
    if acls is None:
        return ctx.respond(throttle_time=0, filter_results=tuple(
            failed(ErrorCode.security_disabled, "No Authorizer is configured on the broker")
            for _ in request.filters))  # fmt: skip
    if not authz.authorize_cluster(ctx, authz.ALTER):
        return ctx.respond(throttle_time=0, filter_results=tuple(
            failed(ErrorCode.cluster_authorization_failed, "not authorized to ALTER the cluster")
            for _ in request.filters))  # fmt: skip
    results: list[Any] = [None] * len(request.filters)
    valid: list[tuple[int, AclBindingFilter]] = []
    for i, item in enumerate(request.filters):
        try:
            valid.append((i, read_filter(item)))
        except AclError as exc:
            results[i] = failed(ErrorCode.invalid_request, str(exc))
    try:
        removed = await acls.delete([f for _, f in valid])
    except StoreError as exc:
        log.warning("DeleteAcls: the metadata store failed: %s", exc)
        for i, _ in valid:
            results[i] = failed(ErrorCode.unknown_server_error, f"the metadata store failed: {exc}")
        return ctx.respond(throttle_time=0, filter_results=tuple(results))
    for (i, _), bindings in zip(valid, removed, strict=True):
        results[i] = ctx.make("DeleteAclsFilterResult", error_code=0, error_message=None,
                              matching_acls=tuple(ctx.make(
                                  "DeleteAclsMatchingAcl", error_code=0, error_message=None,
                                  resource_type=int(b.pattern.resource_type),
                                  resource_name=b.pattern.name,
                                  pattern_type=int(b.pattern.pattern_type),
                                  principal=b.entry.principal, host=b.entry.host,
                                  operation=int(b.entry.operation),
                                  permission_type=int(b.entry.permission))
                                  for b in bindings))  # fmt: skip
    return ctx.respond(throttle_time=0, filter_results=tuple(results))
