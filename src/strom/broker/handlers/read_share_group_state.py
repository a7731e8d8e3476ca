"""ReadShareGroupState (key 84, v0): a share-partition's state, read by its partition's leader.

Between brokers. The leader epoch read with is kept by the share coordinator: a later write
or read from an older leader is FENCED_LEADER_EPOCH. An uninitialized share-partition reads as
start offset -1, state epoch 0, no batches. Rules:
:meth:`strom.broker.share.coordinator.ShareCoordinator.read`.

Authorization: CLUSTER_ACTION on the CLUSTER, else the whole request is CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import Any

from strom.broker import dispatch
from strom.broker.context import RequestContext
from strom.broker.share.coordinator import Key, ReadResult
from strom.broker.share.state_wire import answer_partitions
from strom.protocol.errors import ErrorCode

API_KEY = 84


@dispatch.handler(API_KEY, 0, 0)
async def handle(ctx: RequestContext, request: Any) -> Any:
    async def read(key: Key, p: Any) -> tuple[int, str | None, dict[str, Any]]:
        r = await ctx.shares.state.read(key, int(p.leader_epoch))
        return r.error, r.message, _fields(ctx, r)

    return await answer_partitions(ctx, request, API_KEY, "ReadStateResult", read,
                                   _fields(ctx, ReadResult(ErrorCode.none)))  # fmt: skip


def _fields(ctx: RequestContext, r: ReadResult) -> dict[str, Any]:
    return {"state_epoch": r.state_epoch, "start_offset": r.start_offset,
            "state_batches": tuple(ctx.make("StateBatch", first_offset=b.first,
                                            last_offset=b.last, delivery_state=b.state,
                                            delivery_count=b.deliveries)
                                   for b in r.batches)}  # fmt: skip
