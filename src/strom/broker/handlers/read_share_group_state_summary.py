"""ReadShareGroupStateSummary (key 87, v0–1): a share-partition's start offset and epochs.

Between brokers: the group coordinator describing a share group's offsets
(DescribeShareGroupOffsets). v1 adds the delivery-complete count (KIP-1226's lag). Writes
nothing; an older leader epoch is FENCED_LEADER_EPOCH, -1 reads without the check.

Authorization: CLUSTER_ACTION on the CLUSTER, else the whole request is CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import Any

from strom.broker import dispatch
from strom.broker.context import RequestContext
from strom.broker.share.coordinator import Key, ReadResult
from strom.broker.share.state_wire import answer_partitions, summary_fields
from strom.protocol.errors import ErrorCode

API_KEY = 87


@dispatch.handler(API_KEY, 0, 1)
async def handle(ctx: RequestContext, request: Any) -> Any:
    async def summary(key: Key, p: Any) -> tuple[int, str | None, dict[str, Any]]:
        r = await ctx.shares.state.summary(key, int(p.leader_epoch))
        return r.error, r.message, summary_fields(r)

    return await answer_partitions(ctx, request, API_KEY, "ReadStateSummaryResult", summary,
                                   summary_fields(ReadResult(ErrorCode.none)))  # fmt: skip
