"""AlterPartition (key 56, v2-3): a partition leader proposes a new ISR to the controller.

Served by the active controller only; any other broker answers NOT_CONTROLLER (the leader
finds the controller again and retries). v2 names the ISR's broker ids, v3 also each one's
broker epoch. Validation and the write are :func:`strom.controller.requests.alter_partition`;
the answer carries each partition's resulting leader, leader epoch, ISR and partition epoch.

Authorization: CLUSTER_ACTION on the CLUSTER, else the whole request is CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import Any

from strom.broker import authz, dispatch
from strom.broker.context import RequestContext
from strom.controller import requests
from strom.controller.controller import NotControllerError
from strom.protocol.errors import ErrorCode

API_KEY = 56


def _proposal(topic_id: Any, p: Any) -> requests.IsrProposal:
    with_epochs = getattr(p, "new_isr_with_epochs", None)
    if with_epochs is not None:
        isr = tuple(int(b.broker_id) for b in with_epochs)
        epochs = tuple(int(b.broker_epoch) for b in with_epochs)
    else:
        isr = tuple(int(b) for b in p.new_isr)
        epochs = (-1,) * len(isr)
    return requests.IsrProposal(topic_id, None, int(p.partition_index), int(p.leader_epoch), isr,
                                epochs, int(p.leader_recovery_state), int(p.partition_epoch))  # fmt: skip


@dispatch.handler(API_KEY, 2, 3)
async def handle(ctx: RequestContext, request: Any) -> Any:
    authz.require_cluster(ctx, authz.CLUSTER_ACTION)
    controller = ctx.controller.active()
    proposals = [_proposal(t.topic_id, p) for t in request.topics for p in t.partitions]
    try:
        if controller is None:
            raise NotControllerError("not the controller")
        code, results = await controller.call(lambda term: requests.alter_partition(
            term, int(request.broker_id), int(request.broker_epoch), proposals))  # fmt: skip
    except NotControllerError:
        return ctx.respond(throttle_time=0, error_code=ErrorCode.not_controller, topics=())
    if code != ErrorCode.none:
        return ctx.respond(throttle_time=0, error_code=code, topics=())
    topics: dict[Any, list[Any]] = {}
    for proposal, r in zip(proposals, results, strict=True):
        topics.setdefault(proposal.topic_id, []).append(ctx.make(
            "PartitionData", partition_index=proposal.partition, error_code=r.error,
            leader_id=r.leader, leader_epoch=r.leader_epoch, isr=r.isr,
            leader_recovery_state=r.leader_recovery_state, partition_epoch=r.partition_epoch))  # fmt: skip
    return ctx.respond(
        throttle_time=0, error_code=ErrorCode.none,
        topics=tuple(ctx.make("TopicData", topic_id=t, partitions=tuple(ps))
                     for t, ps in topics.items()),
    )  # fmt: skip
