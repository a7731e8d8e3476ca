"""UpdateMetadata (key 6, v8): the controller's view of the cluster for the metadata cache.

Served only at v8. Fenced like LeaderAndIsr (STALE_CONTROLLER_EPOCH, STALE_BROKER_EPOCH), then
applied to :class:`strom.broker.metadata_cache.MetadataCache` (live brokers, controller id,
partition states); replica fetchers are woken, since a leader's address may be new. Refused
while this broker leads itself (single node, :mod:`strom.broker.local_leadership`).
"""

from __future__ import annotations

from typing import Any

from strom.broker import dispatch
from strom.broker.context import RequestContext
from strom.broker.local_leadership import local_controller_active
from strom.protocol.errors import ErrorCode

API_KEY = 6


def apply(broker: Any, request: Any) -> ErrorCode:
    replicas = broker.replicas
    code = replicas.fence(int(request.controller_epoch), int(request.broker_epoch),
                          int(getattr(broker, "broker_epoch", -1)))  # fmt: skip
    if code != ErrorCode.none:
        return code
    replicas.cache.apply_update_metadata(request)
    if replicas.fetchers is not None:
        replicas.fetchers.wake_all()
    return ErrorCode.none


@dispatch.handler(API_KEY, 8, 8)
async def handle(ctx: RequestContext, request: Any) -> Any:
    if local_controller_active(ctx.broker):
        return ctx.respond(error_code=ErrorCode.stale_controller_epoch)
    return ctx.respond(error_code=apply(ctx.broker, request))
