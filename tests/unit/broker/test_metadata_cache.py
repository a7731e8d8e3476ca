"""The metadata cache knows whether the controller's first UpdateMetadata came (a cluster
member's Metadata answers wait for it: an answer naming no controller stalls librdkafka)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from strom.broker.metadata_cache import MetadataCache


def _update(controller_id: int) -> SimpleNamespace:
    endpoint = SimpleNamespace(host="127.0.0.2", port=9092)
    return SimpleNamespace(controller_id=controller_id, controller_epoch=3, topic_states=(),
                           live_brokers=(SimpleNamespace(id_=2, endpoints=(endpoint,),
                                                         rack=None),))  # fmt: skip


def test_wait_filled_times_out_before_the_first_update_and_returns_at_it() -> None:
    async def main() -> None:
        cache = MetadataCache(node_id=1)
        assert not cache.filled and cache.controller_id == -1
        assert await cache.wait_filled(0.05) is False
        waiter = asyncio.ensure_future(cache.wait_filled(5.0))
        await asyncio.sleep(0.01)
        assert not waiter.done()
        cache.apply_update_metadata(_update(controller_id=2))
        assert await waiter is True
        assert cache.filled and cache.controller_id == 2 and set(cache.brokers) == {2}
        assert await cache.wait_filled(0.0) is True  # filled stays filled

    asyncio.run(main())
