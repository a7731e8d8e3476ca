"""Dynamic broker configs in the metadata store (strom.broker.dynamic_config.read / write):
Kafka's node and document, and the change notification Kafka's brokers read."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from strom.broker import dynamic_config
from strom.metadata.embedded import EmbeddedStore


def test_write_is_kafkas_node_and_announces_the_change(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = EmbeddedStore(tmp_path)
        try:
            await dynamic_config.write(store, "<default>", {"log.retention.ms": "1000"})
            await dynamic_config.write(store, "2", {"message.max.bytes": "2048"})
            await dynamic_config.write(store, "2", {})
            doc = json.loads((await store.get("/config/brokers/<default>"))[0])
            assert doc == {"version": 1, "config": {"log.retention.ms": "1000"}}
            assert await dynamic_config.read(store, "2") == {}
            notes = [json.loads((await store.get(f"/config/changes/{node}"))[0])
                     for node in await store.children("/config/changes")]  # fmt: skip
            assert notes == [{"version": 2, "entity_path": "brokers/<default>"},
                             {"version": 2, "entity_path": "brokers/2"},
                             {"version": 2, "entity_path": "brokers/2"}]  # fmt: skip
        finally:
            await store.close()

    asyncio.run(scenario())
