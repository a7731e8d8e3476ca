"""BrokerMembership.still_registered: a controller request's broker epoch checked against the
registration the store holds (the LeaderAndIsr handler's guard against stale requests)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from strom.metadata.brokers import BrokerMembership
from strom.metadata.embedded import EmbeddedStore
from strom.metadata.zk_model import BrokerRegistration, Endpoint


def test_still_registered_knows_its_registration(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = EmbeddedStore(tmp_path)
        membership = BrokerMembership(store, BrokerRegistration(7, (Endpoint("PLAINTEXT", "h", 1),)),
                                      session_timeout_ms=200)  # fmt: skip
        epoch = await membership.register()
        assert await membership.still_registered(epoch)
        assert await membership.still_registered()  # -1: whichever is current
        # a request meant for an earlier registration of this broker
        assert not await membership.still_registered(epoch - 1)
        # the registration gone behind its back (its session ended): no, once the wait for a
        # registration anew has run out (the session timeout plus the margin)
        await store.delete(membership.path)
        began = time.monotonic()
        assert not await membership.still_registered(epoch, margin_s=0.1)
        assert 0.2 <= time.monotonic() - began < 5
        await membership.close()
        await store.close()

    asyncio.run(scenario())
