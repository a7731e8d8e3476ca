"""ControlledShutdown (key 7, v3): a broker about to stop asks the controller to move its
leaderships away (:func:`strom.controller.requests.controlled_shutdown`).

Served by the active controller only (NOT_CONTROLLER elsewhere); BROKER_NOT_AVAILABLE for a
broker not registered, STALE_BROKER_EPOCH for an epoch not of its current registration. The
answer lists the partitions the broker still leads (none once every one of them had another
live ISR member to lead it); the broker retries until the list is empty.

Authorization: CLUSTER_ACTION on the CLUSTER, else the whole request is CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import Any

from strom.broker import authz, dispatch
from strom.broker.context import RequestContext
from strom.controller import requests
from strom.controller.controller import NotControllerError
from strom.protocol.errors import ErrorCode

API_KEY = 7


@dispatch.handler(API_KEY, 3, 3)
async def handle(ctx: RequestContext, request: Any) -> Any:
    authz.require_cluster(ctx, authz.CLUSTER_ACTION)
    controller = ctx.controller.active()
    try:
        if controller is None:
            raise NotControllerError("not the controller")
        code, remaining = await controller.call(lambda term: requests.controlled_shutdown(
            term, int(request.broker_id), int(request.broker_epoch)))  # fmt: skip
    except NotControllerError:
        code, remaining = ErrorCode.not_controller, []
    return ctx.respond(
        error_code=code,
        remaining_partitions=tuple(ctx.make("RemainingPartition", topic_name=t, partition_index=p)
                                   for t, p in remaining),
    )  # fmt: skip
