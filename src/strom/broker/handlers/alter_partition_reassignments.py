"""AlterPartitionReassignments (key 45, v0-1): start, change or cancel (null replicas)
partition moves (:mod:`strom.controller.reassignment`).

Served by the active controller, or a single node's own (:mod:`strom.controller.single_node`)
(NOT_CONTROLLER elsewhere). Per partition: NONE once the move
is recorded (it completes in the background), UNKNOWN_TOPIC_OR_PARTITION,
INVALID_REPLICA_ASSIGNMENT (empty, duplicate or dead brokers), NO_REASSIGNMENT_IN_PROGRESS
for a cancellation with nothing to cancel; v1 with ``allow_replication_factor_change`` false
refuses a target of another size with INVALID_REPLICATION_FACTOR (KIP-860).

Authorization: ALTER on the CLUSTER, else the whole request is CLUSTER_AUTHORIZATION_FAILED.
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

API_KEY = 45
Outcome = tuple[ErrorCode, str | None]


async def _alter(term: Term, wanted: dict[TP, list[int] | None],
                 allow_rf_change: bool) -> dict[TP, Outcome]:  # fmt: skip
    ctx = term.ctx
    refused: dict[TP, Outcome] = {}
    if not allow_rf_change:
        for tp, replicas in list(wanted.items()):
            doc = ctx.topics.get(tp[0])
            if replicas is None or doc is None or tp[1] not in doc.assignment:
                continue
            current = len(reassignment.original(ctx, tp))
            if len(replicas) != current:
                refused[tp] = (ErrorCode.invalid_replication_factor,
                               f"The replication factor is changed from {current} to "
                               f"{len(replicas)}, which is not allowed.")  # fmt: skip
                del wanted[tp]
    results = await reassignment.alter(term, wanted) if wanted else {}
    return {**results, **refused}


@dispatch.handler(API_KEY, 0, 1)
async def handle(ctx: RequestContext, request: Any) -> Any:
    authz.require_cluster(ctx, authz.ALTER)
    wanted: dict[TP, list[int] | None] = {}
    for t in request.topics:
        for p in t.partitions:
            wanted[(t.name, int(p.partition_index))] = (
                None if p.replicas is None else [int(b) for b in p.replicas])
    allow = bool(getattr(request, "allow_replication_factor_change", True))
    controller = ctx.controller.for_admin()
    try:
        if controller is None:
            raise NotControllerError("not the controller")
        results = await controller.call(lambda term: _alter(term, wanted, allow))
    except NotControllerError:
        return ctx.respond(throttle_time=0, error_code=ErrorCode.not_controller,
                           error_message="This broker is not the controller.",
                           allow_replication_factor_change=allow, responses=())  # fmt: skip
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), (code, message) in results.items():
        by_topic.setdefault(topic, []).append(ctx.make(
            "ReassignablePartitionResponse", partition_index=partition, error_code=code,
            error_message=message))  # fmt: skip
    return ctx.respond(
        throttle_time=0, error_code=ErrorCode.none, error_message=None,
        allow_replication_factor_change=allow,
        responses=tuple(ctx.make("ReassignableTopicResponse", name=t, partitions=tuple(ps))
                        for t, ps in by_topic.items()),
    )  # fmt: skip
