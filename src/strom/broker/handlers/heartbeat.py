"""Heartbeat (key 12, v0–4): keeps a member's session; REBALANCE_IN_PROGRESS asks it to rejoin.

Each member heartbeats every few seconds, and the answer is one of a handful of bodies (per
version and error code): they are encoded once by ``kio`` and reused.

Authorization: READ on the GROUP, else the whole request is GROUP_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import Any

from strom.broker import authz, dispatch
from strom.broker.context import RequestContext
from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.hot_path import EncodedBody
from strom.protocol.messages import encode_body

API_KEY = 12


@dispatch.handler(API_KEY, 0, 4)
async def handle(ctx: RequestContext, request: Any) -> Any:
    authz.require(ctx, authz.READ, authz.GROUP, str(request.group_id))
    try:
        code = ctx.groups.active().heartbeat(
            request.group_id,
            request.member_id,
            getattr(request, "group_instance_id", None),
            int(request.generation_id),
        )
    except KafkaError as exc:
        code = exc.error_code
    return _body(ctx, code)


_BODIES: dict[tuple[int, ErrorCode], EncodedBody] = {}


def _body(ctx: RequestContext, code: ErrorCode) -> EncodedBody:
    key = (ctx.api_version, code)
    body = _BODIES.get(key)
    if body is None:
        response = ctx.respond(throttle_time=0, error_code=code)
        body = _BODIES[key] = EncodedBody(encode_body(response), type(response).__flexible__)
    return body
