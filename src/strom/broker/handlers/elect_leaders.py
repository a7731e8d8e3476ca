"""ElectLeaders (key 43, v0-2): preferred (0) or unclean (1) leader election on request.

Served by the active controller, or a single node's own (:mod:`strom.controller.single_node`)
(NOT_CONTROLLER elsewhere: top-level from v1, per partition in
v0). Null ``topic_partitions`` means every partition (for a preferred election: every one not
led by its preferred replica). Per partition: NONE, ELECTION_NOT_NEEDED (already led by the
preferred replica, or, for unclean, by a live leader), PREFERRED_LEADER_NOT_AVAILABLE,
ELIGIBLE_LEADERS_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION. v0 is always preferred.

Authorization: ALTER on the CLUSTER, else the whole request is CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from strom.broker import authz, dispatch
from strom.broker.context import RequestContext
from strom.controller import requests
from strom.controller.context import TP
from strom.controller.controller import NotControllerError
from strom.protocol.errors import ErrorCode

API_KEY = 43


def _respond(ctx: RequestContext, code: ErrorCode,
             results: Mapping[TP, tuple[ErrorCode, str | None]]) -> Any:  # fmt: skip
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), (error, message) in sorted(results.items()):
        by_topic.setdefault(topic, []).append(ctx.make(
            "PartitionResult", partition_id=partition, error_code=error, error_message=message))  # fmt: skip
    return ctx.respond(
        throttle_time=0, error_code=code,
        replica_election_results=tuple(
            ctx.make("ReplicaElectionResult", topic=t, partition_result=tuple(ps))
            for t, ps in by_topic.items()),
    )  # fmt: skip


@dispatch.handler(API_KEY, 0, 2)
async def handle(ctx: RequestContext, request: Any) -> Any:
    authz.require_cluster(ctx, authz.ALTER)
    election_type = int(getattr(request, "election_type", requests.ELECTION_PREFERRED))
    wanted: list[TP] | None = None
    if request.topic_partitions is not None:
        wanted = [(t.topic, int(p)) for t in request.topic_partitions for p in t.partitions]
    controller = ctx.controller.for_admin()
    try:
        if controller is None:
            raise NotControllerError("not the controller")
        if election_type not in (requests.ELECTION_PREFERRED, requests.ELECTION_UNCLEAN):
            invalid = {tp: (ErrorCode.invalid_request, f"Unknown election type {election_type}")
                       for tp in wanted or []}  # fmt: skip
            return _respond(ctx, ErrorCode.invalid_request, invalid)
        results = await controller.call(
            lambda term: requests.elect_leaders(term, election_type, wanted))
    except NotControllerError:
        message = "This broker is not the controller."
        failed = {tp: (ErrorCode.not_controller, message) for tp in wanted or []}
        return _respond(ctx, ErrorCode.not_controller, failed)
    return _respond(ctx, ErrorCode.none, results)
