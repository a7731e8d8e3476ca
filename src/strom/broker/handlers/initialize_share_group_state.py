"""InitializeShareGroupState (key 83, v0): create or reset share-partitions' state.

Between brokers: the group coordinator asks the share coordinator (the leader of the key's
``__share_group_state`` partition) to initialize the state of newly assigned share-partitions,
or to reset it at a newer state epoch (AlterShareGroupOffsets). Rules:
:meth:`strom.broker.share.coordinator.ShareCoordinator.initialize`; a key this broker does not
coordinate is NOT_COORDINATOR.

Authorization: CLUSTER_ACTION on the CLUSTER, else the whole request is CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import Any

from strom.broker import dispatch
from strom.broker.context import RequestContext
from strom.broker.share.coordinator import Key
from strom.broker.share.state_wire import answer_partitions

API_KEY = 83


@dispatch.handler(API_KEY, 0, 0)
async def handle(ctx: RequestContext, request: Any) -> Any:
    async def initialize(key: Key, p: Any) -> tuple[int, str | None, dict[str, Any]]:
        code, message = await ctx.shares.state.initialize(key, int(p.state_epoch),
                                                          int(p.start_offset))  # fmt: skip
        return code, message, {}

    return await answer_partitions(ctx, request, API_KEY, "InitializeStateResult", initialize)
