"""What a request records in the client quotas and how its response carries the throttle
time (strom.broker.throttling), for each kind of answer the connection encodes."""

from __future__ import annotations

import asyncio
import datetime
import time
from types import SimpleNamespace

from strom.broker import throttling
from strom.broker.connection import ConnectionCore
from strom.protocol import hot_path
from strom.protocol.messages import RequestHeader, build, decode_response, response_class
from strom.protocol.produce_fast import OnePartition
from strom.security.quotas import DEFAULT, ClientQuotas, Entity

T0 = 5_000_000


def _quotas(**values: float) -> ClientQuotas:
    quotas = ClientQuotas(3, 1)
    quotas.update(Entity(None, DEFAULT), values)
    return quotas


def _decoded(api_key: int, version: int, response: object) -> object:
    frame = ConnectionCore(1 << 20).encode(RequestHeader(api_key, version, 7, "c"), response)
    assert isinstance(frame, bytes)
    return decode_response(api_key, version, frame[4:])[1]


def test_produce_records_the_request_size_and_answers_with_the_throttle() -> None:
    quotas = _quotas(producer_byte_rate=1000.0)
    answer = OnePartition("t", hot_path.ProducePartition(0, 0, 41, -1, 0))
    # a bucket of 3 windows x 1000 B/s: two requests of 1500 B empty it, a third owes 1500 B
    for _ in range(2):
        assert throttling.record(quotas, "ANONYMOUS", "c", 0, 9, None, answer, 1500, 0.0, T0) == 0
    ms = throttling.record(quotas, "ANONYMOUS", "c", 0, 9, None, answer, 1500, 0.0, T0)
    assert ms == 1500  # the time 1000 B/s takes to refill 1500 B
    response = _decoded(0, 9, throttling.with_throttle(0, 9, answer, ms))
    assert response.throttle_time == datetime.timedelta(milliseconds=1500)  # type: ignore[attr-defined]
    [topic] = response.responses  # type: ignore[attr-defined]
    assert topic.name == "t" and topic.partition_responses[0].base_offset == 41


def test_fetch_records_record_bytes_of_consumers_only() -> None:
    quotas = _quotas(consumer_byte_rate=100.0)
    records = b"r" * 5000
    answer = hot_path.FetchResponse([hot_path.FetchTopic("t", None, [  # type: ignore[arg-type]
        hot_path.FetchPartition(0, 0, 10, 10, 0, None, -1, records)])])
    assert throttling.fetch_bytes(answer) == 5000
    follower = SimpleNamespace(replica_id=2)
    assert throttling.record(quotas, "u", "c", 1, 12, follower, answer, 60, 0.0, T0) == 0
    consumer = SimpleNamespace(replica_id=-1)
    ms = throttling.record(quotas, "u", "c", 1, 12, consumer, answer, 60, 0.0, T0)
    assert ms == round((5000 - 300) / 100 * 1000)  # beyond the 300 B bucket, refilled at 100 B/s
    throttled = throttling.with_throttle(1, 12, answer, ms)
    assert throttled.throttle_time_ms == ms and throttled.topics == answer.topics


def test_request_time_counts_every_api_but_the_brokers_own() -> None:
    quotas = _quotas(request_percentage=10.0)  # 0.1 s of handling a second
    # 0.5 s of handling: 50 % over the 2 s window is 25 %/s, bounded by one window
    assert throttling.record(quotas, "u", "c", 3, 12, None, None, 10, 0.5, T0) == 1000
    assert throttling.record(quotas, "u", "c", 4, 7, None, None, 10, 0.5, T0) == 0  # LeaderAndIsr
    response = build(response_class(18, 3), error_code=0, api_keys=(), throttle_time=0)
    assert throttling.with_throttle(18, 3, response, 250).throttle_time == \
        datetime.timedelta(milliseconds=250)  # fmt: skip
    cached = hot_path.EncodedBody(b"\0\0\0\0rest", True)
    assert throttling.with_throttle(3, 12, cached, 300).data == b"\0\0\x01\x2crest"
    assert throttling.with_throttle(3, 2, cached, 300) is cached  # v0-2: no such field


def test_the_principal_is_sanitized_once_per_change() -> None:
    user = throttling.QuotaUser()
    assert user.of("User:CN=a b") == "CN%3Da%20b"
    assert user.of("User:CN=a b") == "CN%3Da%20b"
    assert user.of("User:bob") == "bob"


def test_busy_time_leaves_out_what_a_handler_waited_for() -> None:
    async def handler() -> str:
        await asyncio.sleep(0.3)  # the purgatory, a replication, an fsync
        end = time.perf_counter() + 0.05
        while time.perf_counter() < end:  # work on the loop
            pass
        return "answer"

    async def main() -> tuple[str, float]:
        timed = throttling.BusyTime(handler())
        return await timed, timed.busy_s

    answer, busy = asyncio.run(main())
    assert answer == "answer"
    assert 0.05 <= busy < 0.2

    async def cancelled() -> None:
        timed = throttling.BusyTime(asyncio.sleep(10))
        task = asyncio.ensure_future(timed)
        await asyncio.sleep(0.01)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return
        raise AssertionError("not cancelled")

    asyncio.run(cancelled())
