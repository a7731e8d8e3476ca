"""The broker-to-broker connection against a real broker: pipelining, errors, reconnection."""

from __future__ import annotations

import asyncio

import pytest

from strom.protocol.messages import build, request_class
from strom.replication.connection import BrokerConnection, BrokerConnectionError
from strom.testing import BrokerProcess
from strom.testing.process import free_port

METADATA = 3
API_VERSIONS = 18


def _api_versions() -> object:
    return build(request_class(API_VERSIONS, 3), client_software_name="t",
                 client_software_version="1")  # fmt: skip


def test_pipelined_requests_are_answered_in_order(fresh_broker: BrokerProcess) -> None:
    broker = fresh_broker
    async def run() -> None:
        conn = BrokerConnection("127.0.0.1", broker.port, client_id="test")
        metadata = build(request_class(METADATA, 12), topics=None, allow_auto_topic_creation=False,
                         include_topic_authorized_operations=False)
        answers = await asyncio.gather(
            *(conn.send(API_VERSIONS, 3, _api_versions(), 10) if i % 2 else
              conn.send(METADATA, 12, metadata, 10) for i in range(20))
        )  # fmt: skip
        for i, answer in enumerate(answers):
            if i % 2:
                assert int(answer.error_code) == 0 and answer.api_keys
            else:
                assert [b.port for b in answer.brokers] == [broker.port]
        conn.close()
        # closed connections reconnect on the next send
        again = await conn.send(API_VERSIONS, 3, _api_versions(), 10)
        assert int(again.error_code) == 0
        conn.close()

    asyncio.run(asyncio.wait_for(run(), 30))


def test_unreachable_peer_is_a_connection_error() -> None:
    port = free_port()
    async def run() -> None:
        conn = BrokerConnection("127.0.0.1", port, client_id="test", connect_timeout=2)
        with pytest.raises(BrokerConnectionError, match="cannot connect"):
            await conn.send(API_VERSIONS, 3, _api_versions(), 5)

    asyncio.run(asyncio.wait_for(run(), 30))
