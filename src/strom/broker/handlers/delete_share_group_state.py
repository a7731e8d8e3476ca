"""DeleteShareGroupState (key 86, v0): remove share-partitions' state (tombstones).

Between brokers: the group coordinator deleting a share group, or its offsets for some topics
(DeleteShareGroupOffsets). Deleting state that does not exist succeeds.

Authorization: CLUSTER_ACTION on the CLUSTER, else the whole request is CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import Any

from strom.broker import dispatch
from strom.broker.context import RequestContext
from strom.broker.share.coordinator import Key
from strom.broker.share.state_wire import answer_partitions

API_KEY = 86


@dispatch.handler(API_KEY, 0, 0)
async def handle(ctx: RequestContext, request: Any) -> Any:
    async def delete(key: Key, p: Any) -> tuple[int, str | None, dict[str, Any]]:
        return await ctx.shares.state.delete(key), None, {}

    return await answer_partitions(ctx, request, API_KEY, "DeleteStateResult", delete)
