"""JoinGroup (key 11, v0–9): join or rejoin a classic group; answered when the join completes.

v0 has no rebalance timeout (the session timeout stands in); v4+ dynamic members first get
MEMBER_ID_REQUIRED with their id; v5+ carry ``group.instance.id`` (static members); v9 tells a
returning static leader to skip the assignment (before v9 it gets no member list instead).

Authorization: READ on the GROUP, else the whole request is GROUP_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import Any

from strom.broker import authz, dispatch
from strom.broker.context import RequestContext
from strom.broker.group.model import JoinResult
from strom.broker.group.service import millis, wait_for_callback
from strom.protocol.errors import ErrorCode, KafkaError

API_KEY = 11


@dispatch.handler(API_KEY, 0, 9)
async def handle(ctx: RequestContext, request: Any) -> Any:
    authz.require(ctx, authz.READ, authz.GROUP, str(request.group_id))
    version = ctx.api_version
    session = millis(request.session_timeout)
    rebalance = millis(getattr(request, "rebalance_timeout", -1)) if version >= 1 else session
    protocols = [(p.name, bytes(p.metadata)) for p in request.protocols]
    instance_id = getattr(request, "group_instance_id", None)
    try:
        coord = ctx.groups.active()
    except KafkaError as exc:
        result = JoinResult(exc.error_code, request.member_id)
    else:
        if ctx.shares.groups.get(request.group_id) is not None:  # a share group's id
            result = JoinResult(ErrorCode.inconsistent_group_protocol, request.member_id)
            return _respond(ctx, result)
        result = await wait_for_callback(
            lambda cb: coord.join(
                request.group_id,
                request.member_id,
                instance_id,
                version >= 4,
                ctx.client_id,
                f"/{ctx.client_host}",
                rebalance,
                session,
                request.protocol_type,
                protocols,
                cb,
            )  # fmt: skip
        )
    return _respond(ctx, result)


def _respond(ctx: RequestContext, result: JoinResult) -> Any:
    version = ctx.api_version
    members = result.members
    if result.skip_assignment and version < 9:
        members = []
    return ctx.respond(
        throttle_time=0,
        error_code=result.error,
        generation_id=result.generation_id,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name if version >= 7 else (result.protocol_name or ""),
        leader=result.leader_id,
        skip_assignment=result.skip_assignment,
        member_id=result.member_id,
        members=tuple(
            ctx.make("JoinGroupResponseMember", member_id=m, group_instance_id=i, metadata=md)
            for m, i, md in members
        ),
    )
