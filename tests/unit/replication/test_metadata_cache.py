"""The metadata cache knows whether the controller's first UpdateMetadata came (a cluster
member's Metadata answers wait for it: an answer naming no controller stalls librdkafka)."""

from __future__ import annotations

import asyncio

from strom.replication.metadata_cache import BrokerInfo, MetadataCache


def test_wait_filled_times_out_before_the_first_update_and_returns_at_it() -> None:
    async def main() -> None:
        cache = MetadataCache(node_id=1)
        assert not cache.filled and cache.controller_id == -1
        assert await cache.wait_filled(0.05) is False
        waiter = asyncio.ensure_future(cache.wait_filled(5.0))
        await asyncio.sleep(0.01)
        assert not waiter.done()
        cache.apply(2, 3, [BrokerInfo(2, "127.0.0.2", 9092)], [])
        assert await waiter is True
        assert cache.filled and cache.controller_id == 2 and set(cache.brokers) == {2}
        assert await cache.wait_filled(0.0) is True  # filled stays filled

    asyncio.run(main())
