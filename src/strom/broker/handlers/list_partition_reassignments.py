"""ListPartitionReassignments (key 46, v0): the partition moves in flight, with their full
replica list and the replicas being added and removed.

Served by the active controller, or a single node's own (:mod:`strom.controller.single_node`)
(NOT_CONTROLLER elsewhere). Null ``topics`` lists every move;
a named partition that is not moving (or does not exist) is left out, as in Kafka.

Authorization: DESCRIBE on the CLUSTER, else the whole request is CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import Any

from strom.broker import authz, dispatch
from strom.broker.context import RequestContext
from strom.controller import reassignment
from strom.controller.context import TP
from strom.controller.controller import NotControllerError
from strom.controller.term import Term
from strom.protocol.errors import ErrorCode

API_KEY = 46


async def _list(term: Term, wanted: list[TP] | None) -> dict[TP, Any]:
    return reassignment.ongoing(term.ctx, wanted)


@dispatch.handler(API_KEY, 0, 0)
async def handle(ctx: RequestContext, request: Any) -> Any:
    authz.require_cluster(ctx, authz.DESCRIBE)
    wanted: list[TP] | None = None
    if request.topics is not None:
        wanted = [(t.name, int(p)) for t in request.topics for p in t.partition_indexes]
    controller = ctx.controller.for_admin()
    try:
        if controller is None:
            raise NotControllerError("not the controller")
        found = await controller.call(lambda term: _list(term, wanted))
    except NotControllerError:
        return ctx.respond(throttle_time=0, error_code=ErrorCode.not_controller,
                           error_message="This broker is not the controller.", topics=())  # fmt: skip
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), (replicas, adding, removing) in sorted(found.items()):
        by_topic.setdefault(topic, []).append(ctx.make(
            "OngoingPartitionReassignment", partition_index=partition, replicas=tuple(replicas),
            adding_replicas=tuple(adding), removing_replicas=tuple(removing)))  # fmt: skip
    return ctx.respond(
        throttle_time=0, error_code=ErrorCode.none, error_message=None,
        topics=tuple(ctx.make("OngoingTopicReassignment", name=t, partitions=tuple(ps))
                     for t, ps in by_topic.items()),
    )  # fmt: skip
