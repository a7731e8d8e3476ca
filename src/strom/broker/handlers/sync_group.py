"""SyncGroup (key 14, v0–5): the leader hands in the assignment, every member gets its own.

Assignments are opaque bytes. Answered when the leader's assignment is stored and replicated (the
group record, acks=-1; on failure every member gets the error and the group rebalances), or at
once in a Stable group; v5+ carries the protocol type and name both ways.

Authorization: READ on the GROUP, else the whole request is GROUP_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import Any

from strom.broker import authz, dispatch
from strom.broker.context import RequestContext
from strom.broker.group.model import SyncResult
from strom.broker.group.service import wait_for_callback
from strom.protocol.errors import KafkaError

API_KEY = 14


@dispatch.handler(API_KEY, 0, 5)
async def handle(ctx: RequestContext, request: Any) -> Any:
    authz.require(ctx, authz.READ, authz.GROUP, str(request.group_id))
    assignments = {a.member_id: bytes(a.assignment) for a in request.assignments}
    try:
        coord = ctx.groups.active()
    except KafkaError as exc:
        result = SyncResult(exc.error_code)
    else:
        result = await wait_for_callback(
            lambda cb: coord.sync(
                request.group_id,
                int(request.generation_id),
                request.member_id,
                getattr(request, "group_instance_id", None),
                getattr(request, "protocol_type", None),
                getattr(request, "protocol_name", None),
                assignments,
                cb,
            )  # fmt: skip
        )
    return ctx.respond(
        throttle_time=0,
        error_code=result.error,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name,
        assignment=result.assignment,
    )
