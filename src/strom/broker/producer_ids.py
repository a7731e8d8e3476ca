"""Producer id allocation for idempotent (and later transactional) producers.

Ids come from blocks reserved in the metadata store node ``/latest_producer_id_block``
(``{"next": N}``, as Kafka's ZooKeeper path), so ids are never handed out twice, across
restarts or brokers: the block is reserved (persisted) before any id of it is used.
"""

from __future__ import annotations

import json

from strom.metadata.store import MetadataStore, NoNodeError

PATH = "/latest_producer_id_block"
BLOCK_SIZE = 1000


class ProducerIdManager:
    def __init__(self, store: MetadataStore) -> None:
        self._store = store
        self._next = 0
        self._end = 0

    def _reserve_block(self) -> None:
        try:
            data, version = self._store.get(PATH)
            start = int(json.loads(data)["next"])
            self._store.set(PATH, json.dumps({"next": start + BLOCK_SIZE}).encode(), version)
        except NoNodeError:
            start = 0
            self._store.create(PATH, json.dumps({"next": BLOCK_SIZE}).encode())
        self._next, self._end = start, start + BLOCK_SIZE

    def next_id(self) -> int:
        if self._next >= self._end:
            self._reserve_block()
        pid = self._next
        self._next += 1
        return pid
