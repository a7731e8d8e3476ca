"""A single node's stand-in controller (strom.controller.single_node) on a real embedded store
and topic registry: the controller's election and reassignment functions applied to one broker,
including the corner no real client reaches (a partition assigned to a broker that is gone)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from strom.controller import reassignment, requests
from strom.controller.single_node import SingleNodeController
from strom.controller.term import Term
from strom.metadata.embedded import EmbeddedStore
from strom.metadata.topics import TopicRegistry
from strom.metadata.zk_model import BrokerRegistration, Endpoint, PartitionState, topic_path
from strom.protocol.errors import ErrorCode


def _hosted() -> dict[tuple[str, int], Any]:
    """The replica manager's partitions as the stand-in reads them: led here, epoch 3."""
    return {("t", p): SimpleNamespace(leader_id=1, leader_epoch=3, isr=(1,), partition_epoch=0)
            for p in (0, 1)}  # fmt: skip


def test_one_broker_elects_nothing_and_moves_back_to_itself(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = EmbeddedStore(tmp_path)
        await store.start()
        topics = TopicRegistry(store)
        await topics.start()
        try:
            # t-0 prefers this broker, t-1 prefers broker 7, which is gone
            await topics.create("t", {0: [1, 7], 1: [7, 1]}, {})
            hosted = _hosted()
            me = BrokerRegistration(1, (Endpoint("PLAINTEXT", "127.0.0.1", 9092),))
            c = SingleNodeController(store, topics, hosted, me, lambda: 5)
            wanted = [("t", 0), ("t", 1), ("t", 2)]
            preferred = await c.call(lambda term: requests.elect_leaders(term, 0, wanted))
            assert {tp: code for tp, (code, _m) in preferred.items()} == {
                ("t", 0): ErrorCode.election_not_needed,
                ("t", 1): ErrorCode.preferred_leader_not_available,
                ("t", 2): ErrorCode.unknown_topic_or_partition,
            }
            unclean = await c.call(lambda term: requests.elect_leaders(term, 1, wanted[:2]))
            assert {tp: code for tp, (code, _m) in unclean.items()} == {
                ("t", 0): ErrorCode.election_not_needed, ("t", 1): ErrorCode.election_not_needed}

            moved = await c.call(lambda term: reassignment.alter(term, {("t", 0): [1], ("t", 1): [7]}))
            assert {tp: code for tp, (code, _m) in moved.items()} == {
                ("t", 0): ErrorCode.none, ("t", 1): ErrorCode.invalid_replica_assignment}

            async def listing(term: Term) -> Any:
                return reassignment.ongoing(term.ctx, None)

            assert await c.call(listing) == {}
            # the completed move is in the registry, in its own document format
            data, _ = await store.get(topic_path("t"))
            doc = json.loads(data)
            assert (doc["version"], doc["partitions"]) == (3, {"0": [1], "1": [7, 1]})
            deadline = time.monotonic() + 10
            while topics.get("t").replicas != {0: [1], 1: [7, 1]}:  # type: ignore[union-attr]
                assert time.monotonic() < deadline, topics.get("t")
                await asyncio.sleep(0.02)
            # the leader epoch a single node serves never moves
            assert hosted[("t", 0)].leader_epoch == 3

            async def move_leader(term: Term) -> Any:
                return await term.states().write(("t", 1), PartitionState(7, 4, (7,), 0), 0)

            assert await c.call(move_leader) is None  # no other broker can lead
        finally:
            await topics.close()
            await store.close()

    asyncio.run(scenario())
