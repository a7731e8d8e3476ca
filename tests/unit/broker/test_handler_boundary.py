"""Whatever escapes a handler, the request is answered (Kafka's getErrorResponse), the
connection stays usable and the log gets one line without a traceback."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from strom.broker import dispatch
from strom.broker.connection import CloseConnection
from strom.broker.observability import BrokerMetrics
from strom.broker.server import KafkaConnection, Pending
from strom.protocol.errors import KafkaError
from strom.protocol.messages import decode_response
from strom.security.quota_store import QuotaStore
from strom.security.quotas import ClientQuotas
from tests.integration.wire_bytes import TAGS, carr, cstr, frame


class _Config:
    def get_int(self, name: str) -> int:
        return 100 * 1024 * 1024


class _Store:
    """The metadata store's durability counter: these handlers write nothing to it."""

    seq = 0

    async def durable(self, seq: int) -> None:
        raise AssertionError("no handler here writes the metadata store")


class _Broker:
    config = _Config()
    connections: set[Any] = set()
    store = _Store()
    metrics = BrokerMetrics()
    quotas = QuotaStore(store, ClientQuotas())  # type: ignore[arg-type]  # no quota set: unused


def _answer(monkeypatch, api_key: int, fn, data: bytes) -> bytes | None:
    dispatch.load_handlers()
    spec = dispatch.lookup(api_key)
    assert spec is not None
    monkeypatch.setitem(
        dispatch._REGISTRY, api_key,
        dispatch.HandlerSpec(api_key, spec.min_version, spec.max_version, spec.advertise_min, fn),
    )  # fmt: skip
    conn = KafkaConnection(_Broker(), set())  # type: ignore[arg-type]

    async def answer() -> Any:
        begun = conn.begin(data[4:], 0.0)
        return await conn.complete(begun) if isinstance(begun, Pending) else begun

    return asyncio.run(answer())


def _delete_groups(names: list[str]) -> bytes:
    return frame(42, 2, 31, carr([cstr(n) for n in names]) + TAGS)


def test_a_bug_in_a_handler_is_unknown_server_error_with_one_log_line(monkeypatch, caplog) -> None:
    async def broken(ctx, request):
        return [g.upper() for g in None]  # type: ignore[attr-defined]

    with caplog.at_level(logging.INFO, logger="strom.broker.server"):
        out = _answer(monkeypatch, 42, broken, _delete_groups(["a", "b"]))
    assert isinstance(out, bytes)
    correlation, resp = decode_response(42, 2, out[4:])
    assert correlation == 31
    assert [(r.group_id, r.error_code) for r in resp.results] == [
        ("a", ErrorCode.unknown_server_error),
        ("b", ErrorCode.unknown_server_error),
    ]
    (record,) = [r for r in caplog.records if "api key 42" in r.getMessage()]
    assert record.exc_info is None and "TypeError" in record.getMessage()
    assert "test_handler_boundary.py" in record.getMessage()  # where it failed, in one line


def test_a_kafka_error_escaping_a_handler_keeps_its_code(monkeypatch, caplog) -> None:
    async def refuses(ctx, request):
        raise KafkaError(ErrorCode.not_coordinator, "moved")

    out = _answer(monkeypatch, 42, refuses, _delete_groups(["g"]))
    assert isinstance(out, bytes)
    _, resp = decode_response(42, 2, out[4:])
    assert [(r.group_id, r.error_code) for r in resp.results] == [("g", ErrorCode.not_coordinator)]


def test_a_response_that_cannot_be_encoded_is_answered_with_an_error(monkeypatch) -> None:
    async def none_into_non_nullable(ctx, request):
        # "Unexpectedly received None value": a request null copied into the response
        return ctx.respond(throttle_time=0, results=(ctx.make("DeletableGroupResult", group_id=None, error_code=0),))

    out = _answer(monkeypatch, 42, none_into_non_nullable, _delete_groups(["g"]))
    assert isinstance(out, bytes)
    _, resp = decode_response(42, 2, out[4:])
    assert [(r.group_id, r.error_code) for r in resp.results] == [("g", ErrorCode.unknown_server_error)]


def test_acks_zero_produce_failure_closes_the_connection(monkeypatch) -> None:
    async def broken(ctx, request):
        raise RuntimeError("boom")

    body = cstr(None) + (0).to_bytes(2, "big") + (1000).to_bytes(4, "big") + carr([]) + TAGS
    with pytest.raises(CloseConnection):
        _answer(monkeypatch, 0, broken, frame(0, 9, 1, body))
