"""DeleteShareGroupOffsets (key 92, v0): forget a share group's state for some topics.

Only while the share group has no members (NON_EMPTY_GROUP). The topics' share-partition state
is deleted (DeleteShareGroupState); the next member to read them starts where
``share.auto.offset.reset`` says. A topic that does not exist is UNKNOWN_TOPIC_OR_PARTITION; a
group that is not a share group here GROUP_ID_NOT_FOUND.

Authorization: DELETE on the GROUP (else GROUP_AUTHORIZATION_FAILED) and READ on each topic (else
TOPIC_AUTHORIZATION_FAILED, its state kept).
"""

from __future__ import annotations

from typing import Any

from strom.broker import authz, dispatch
from strom.broker.context import RequestContext
from strom.protocol.errors import ErrorCode

API_KEY = 92
E = ErrorCode


@dispatch.handler(API_KEY, 0, 0)
async def handle(ctx: RequestContext, request: Any) -> Any:
    shares = ctx.shares
    group_id = str(request.group_id)

    def top(code: ErrorCode, message: str | None = None) -> Any:
        ctx.metrics.request_error(API_KEY, code)
        return ctx.respond(throttle_time=0, error_code=code, error_message=message, responses=())

    if not authz.authorize(ctx, authz.DELETE, authz.GROUP, group_id):
        return top(E.group_authorization_failed, f"not authorized to DELETE group {group_id}")
    if (code := shares.not_here(group_id)) is not None:
        return top(code)
    group = shares.groups.get(group_id)
    if group is None:
        return top(E.group_id_not_found, f"Group {group_id} is not a share group.")
    if group.members:
        return top(E.non_empty_group, f"Share group {group_id} has members: stop them first.")
    responses = []
    for t in request.topics:
        name = str(t.topic_name)
        info = ctx.topics.get(name)
        code, message = E.none, None
        if not authz.authorize(ctx, authz.READ, authz.TOPIC, name):
            code, message = E.topic_authorization_failed, f"not authorized to READ {name}"
        elif info is None:
            code, message = E.unknown_topic_or_partition, f"Topic {name} does not exist."
        elif info.topic_id in group.initialized:
            code = (await shares.delete_state(group_id, [info.topic_id])).get(info.topic_id, E.none)
        if code:
            ctx.metrics.request_error(API_KEY, code)
        responses.append(ctx.make("DeleteShareGroupOffsetsResponseTopic", topic_name=name,
                                  topic_id=info.topic_id if info else None, error_code=code,
                                  error_message=message))  # fmt: skip
    return ctx.respond(throttle_time=0, error_code=E.none, responses=tuple(responses))
