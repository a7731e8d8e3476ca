"""CreateAcls (key 30): store ACL bindings, each answered on its own.

CLUSTER ALTER is required (every creation CLUSTER_AUTHORIZATION_FAILED); without an authorizer
every creation is SECURITY_DISABLED. A binding Kafka would refuse (ANY / UNKNOWN fields, a
CLUSTER resource not named ``kafka-cluster``, a principal without a type) is INVALID_REQUEST
and the others are still stored. Stored bindings apply on every broker
(:mod:`strom.security.acl.store`) before the answer leaves.
"""

from __future__ import annotations

import logging
from typing import Any

from strom.broker import authz, dispatch
from strom.broker.acl_requests import read_creation
from strom.broker.context import RequestContext
from strom.metadata.store import StoreError
from strom.protocol.errors import ErrorCode
from strom.security.acl.model import AclBinding, AclError

API_KEY = 30
log = logging.getLogger(__name__)


@dispatch.handler(API_KEY, 1, 3)
async def handle(ctx: RequestContext, request: Any) -> Any:
    def result(code: ErrorCode, message: str | None = None) -> Any:
        return ctx.make("AclCreationResult", error_code=code, error_message=message)

    acls = ctx.services.acls
    if acls is None:
        return ctx.respond(throttle_time=0, results=tuple(
            result(ErrorCode.security_disabled, "No Authorizer is configured on the broker")
            for _ in request.creations))  # fmt: skip
    if not authz.authorize_cluster(ctx, authz.ALTER):
        return ctx.respond(throttle_time=0, results=tuple(
            result(ErrorCode.cluster_authorization_failed, "not authorized to ALTER the cluster")
            for _ in request.creations))  # fmt: skip
    outcomes: list[Any] = []
    valid: list[tuple[int, AclBinding]] = []
    for i, item in enumerate(request.creations):
        try:
            valid.append((i, read_creation(item)))
            outcomes.append(None)
        except AclError as exc:
            outcomes.append(result(ErrorCode.invalid_request, str(exc)))
    try:
        await acls.create([b for _, b in valid])
        code, message = ErrorCode.none, None
    except StoreError as exc:
        log.warning("CreateAcls: the metadata store failed: %s", exc)
        code, message = ErrorCode.unknown_server_error, f"the metadata store failed: {exc}"
    for i, _ in valid:
        outcomes[i] = result(code, message)
    return ctx.respond(throttle_time=0, results=tuple(outcomes))
