"""WriteShareGroupState (key 85, v0–1): a share-partition's leader persists its state.

Between brokers: the start offset, the state batches that changed (combined into the stored
state), and from v1 the delivery-complete count (KIP-1226). Written with acks=all before the
answer. Rules (fencing by leader and state epoch, uninitialized = INVALID_REQUEST):
:meth:`strom.broker.share.coordinator.ShareCoordinator.write`.

Authorization: CLUSTER_ACTION on the CLUSTER, else the whole request is CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import Any

from strom.broker import dispatch
from strom.broker.context import RequestContext
from strom.broker.share.coordinator import Key
from strom.broker.share.state import Batch
from strom.broker.share.state_wire import answer_partitions

API_KEY = 85


@dispatch.handler(API_KEY, 0, 1)
async def handle(ctx: RequestContext, request: Any) -> Any:
    async def write(key: Key, p: Any) -> tuple[int, str | None, dict[str, Any]]:
        batches = [Batch(int(b.first_offset), int(b.last_offset), int(b.delivery_state),
                         int(b.delivery_count)) for b in p.state_batches]  # fmt: skip
        code, message = await ctx.shares.state.write(
            key, int(p.state_epoch), int(p.leader_epoch), int(p.start_offset),
            int(getattr(p, "delivery_complete_count", -1)), batches)  # fmt: skip
        return code, message, {}

    return await answer_partitions(ctx, request, API_KEY, "WriteStateResult", write)
