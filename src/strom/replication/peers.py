"""One :class:`BrokerConnection` per live peer broker, for a broker-side service that talks
to whichever broker leads or coordinates something (transaction markers to partition leaders,
KIP-890 verification to transaction coordinators).

Invariant: a cached connection is to the address the metadata cache has for that broker now;
a broker that re-registered elsewhere gets a new connection (the old one is closed), and a
broker the cache does not know is BROKER_NOT_AVAILABLE. Connections originate from the
broker's own listen address (``source_host``), so a network partition of the broker cuts
them too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from strom.protocol.errors import ErrorCode, KafkaError
from strom.replication.connection import BrokerConnection

if TYPE_CHECKING:
    from strom.replication.metadata_cache import MetadataCache


class PeerConnections:
    def __init__(self, cache: MetadataCache, client_id: str, source_host: str | None) -> None:
        self.cache = cache
        self.client_id = f"{client_id}-{cache.node_id}"
        self._conns: dict[int, BrokerConnection] = {}
        self._source = source_host

    def get(self, broker_id: int) -> BrokerConnection:
        """The connection to ``broker_id`` at its current address (opened lazily by its
        first request); KafkaError BROKER_NOT_AVAILABLE when the broker is not alive."""
        info = self.cache.broker(broker_id)
        if info is None:
            raise KafkaError(ErrorCode.broker_not_available, f"broker {broker_id} is not alive")
        conn = self._conns.get(broker_id)
        if conn is None or (conn.host, conn.port) != (info.host, info.port):
            if conn is not None:
                conn.close()
            conn = BrokerConnection(info.host, info.port, client_id=self.client_id,
                                    source_host=self._source)  # fmt: skip
            self._conns[broker_id] = conn
        return conn

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()
