"""The shape the five share-group state APIs (Initialize/Read/ReadSummary/Write/Delete
ShareGroupState, keys 83-87) answer in: between brokers, CLUSTER_ACTION on the CLUSTER or the
whole request is CLUSTER_AUTHORIZATION_FAILED; then one result per (group, topic id,
partition) of the request, in request order, with the error code and message of each
partition's outcome (counted in the request error metrics), per topic in a ``result`` entity
of the API's own name. What differs between the APIs is only what is done for a partition and
which fields its answer carries (:data:`PartitionAnswer`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from strom.broker import authz
from strom.broker.share.coordinator import Key, ReadResult
from strom.protocol.errors import KafkaError

if TYPE_CHECKING:
    from strom.broker.context import RequestContext

#: What a partition of the request is answered: (error code, error message, the other fields
#: of its PartitionResult). May raise KafkaError: the partition is answered with its code.
PartitionAnswer = Callable[[Key, Any], Awaitable[tuple[int, str | None, Mapping[str, Any]]]]


async def answer_partitions(ctx: RequestContext, request: Any, api_key: int, result: str,
                            answer: PartitionAnswer,
                            failed_fields: Mapping[str, Any] | None = None) -> Any:  # fmt: skip
    """The response to ``request`` (module doc): ``answer`` for each of its partitions;
    ``failed_fields``: the other fields of a partition whose ``answer`` raised KafkaError."""
    authz.require_cluster(ctx, authz.CLUSTER_ACTION)
    group = str(request.group_id)
    results = []
    for topic in request.topics:
        parts = []
        for p in topic.partitions:
            try:
                code, message, fields = await answer((group, topic.topic_id, int(p.partition)), p)
            except KafkaError as exc:
                code, message, fields = exc.error_code, str(exc), failed_fields or {}
            if code:
                ctx.metrics.request_error(api_key, code)
            parts.append(ctx.make("PartitionResult", partition=p.partition, error_code=code,
                                  error_message=message, **fields))  # fmt: skip
        results.append(ctx.make(result, topic_id=topic.topic_id, partitions=tuple(parts)))
    return ctx.respond(results=tuple(results))


def summary_fields(r: ReadResult) -> dict[str, Any]:
    """ReadShareGroupStateSummary's fields of a partition read as ``r``."""
    return {"state_epoch": r.state_epoch, "leader_epoch": r.leader_epoch,
            "start_offset": r.start_offset,
            "delivery_complete_count": r.delivery_complete_count}  # fmt: skip
