"""What ShareFetch and ShareAcknowledge answers share: requests' acknowledgements, leader hints.

A partition answered NOT_LEADER_OR_FOLLOWER (or FENCED_LEADER_EPOCH) carries the current
leader and its epoch as the metadata cache knows them, and the answer lists those leaders'
endpoints (``node_endpoints``), so the client moves without a Metadata round trip (KIP-951).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from strom.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from strom.broker.context import RequestContext

AckBatches = list[tuple[int, int, list[int]]]
LEADER_ERRORS = (ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch)


def acknowledgements(topics: Iterable[Any], field: str) -> dict[tuple[uuid.UUID, int], AckBatches]:
    """(topic id, partition) -> its acknowledgement batches (first, last, types), for the
    partitions of a request's ``topics`` that carry some (``field``: the batches' field)."""
    out: dict[tuple[uuid.UUID, int], AckBatches] = {}
    for t in topics:
        for p in t.partitions:
            batches = getattr(p, field, ()) or ()
            if batches:
                out[(t.topic_id, int(p.partition_index))] = [
                    (int(b.first_offset), int(b.last_offset), [int(x) for x in b.acknowledge_types])
                    for b in batches
                ]
    return out


def current_leader(ctx: RequestContext, topic_id: uuid.UUID, index: int) -> tuple[int, int]:
    """(leader id, leader epoch) of the partition per the metadata cache, (-1, -1) unknown."""
    info = ctx.topics.by_id(topic_id)
    state = ctx.replicas.cache.partition(info.name, index) if info is not None else None
    if state is None:
        return -1, -1
    return state.leader, state.leader_epoch


def node_endpoints(ctx: RequestContext, leaders: Iterable[int]) -> tuple[Any, ...]:
    out = []
    for node_id in sorted(set(leaders)):
        broker = ctx.replicas.cache.broker_on(node_id, ctx.client.listener) if (
            node_id >= 0) else None  # fmt: skip
        if broker is not None:
            out.append(ctx.make("NodeEndpoint", node_id=broker.node_id, host=broker.host,
                                port=broker.port, rack=broker.rack))  # fmt: skip
    return tuple(out)
