"""Client quotas applied to requests: what each records, and the throttle time in its answer.

Kafka's ``KafkaApis`` with ``QuotaFactory`` in small, used by the connection
(:mod:`strom.broker.server`) only while some entity sets an enforced quota
(:attr:`~strom.security.quotas.ClientQuotas.active`); otherwise nothing here runs.

What is recorded, per (user, client id) as the matching entity groups them
(:mod:`strom.security.quotas`):

- ``producer_byte_rate``: a Produce request's size in bytes (its frame, as Kafka's
  ``request.sizeInBytes``), acks=0 included;
- ``consumer_byte_rate``: a consumer's Fetch response's record bytes (a follower's Fetch is
  replication, never a client's quota). The Fetch handler caps the response at what the quota
  window holds (:meth:`~strom.security.quotas.ClientQuotaManager.max_value_in_window`), as
  Kafka does. Kafka answers a throttled Fetch with an empty response and takes the bytes back;
  strom sends the records it read and throttles for them: the same rate, without a fetch
  session's partitions answered empty (documented in ``docs/quotas.md``);
- ``request_percentage``: the time the handler ran (a request's "thread time": strom has one
  event loop; a handler that waits, for the purgatory, a replication, an fsync, is timed
  step by step by :class:`BusyTime`, its waits left out), as percent of a second; the
  controller's and the brokers' own APIs are exempt (Kafka's ``ClusterAction`` requests).

- ``controller_mutation_rate``: the partitions CreateTopics, CreatePartitions and DeleteTopics
  create or delete, recorded by their handlers through :func:`mutation_quota` (Kafka's
  ``ControllerMutationQuotaManager.newQuotaFor``: strict from the version KIP-599 gave each
  API, permissive before); the throttle time a handler puts in its answer is one of the
  quotas' here.

The throttle time is the largest of the quotas' (Kafka's ``max(bandwidth, request)``); it is
written into the response's ``throttle_time_ms`` and the connection is muted for that long
after sending it (KIP-219: the client waits as well; a client that does not is not read).
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Coroutine, Generator
from datetime import timedelta
from time import perf_counter
from typing import TYPE_CHECKING, Any

from strom.broker import zero_copy
from strom.protocol import hot_path
from strom.protocol.produce_fast import OnePartition
from strom.security.quotas import ClientQuotas, MutationQuota, sanitize, user_name

if TYPE_CHECKING:
    from strom.broker.context import RequestContext

PRODUCE, FETCH, METADATA = 0, 1, 3
#: Kafka's ClusterAction requests (controller to broker, broker to broker): never throttled
EXEMPT = frozenset({4, 5, 6, 7, 27, 56, 83, 84, 85, 86, 87})
_I32 = struct.Struct(">i")
#: the APIs a controller_mutation_rate applies to -> their first strict version (KIP-599)
MUTATIONS = {19: 6, 20: 5, 37: 3}


class QuotaUser:
    """A connection's principal as a quota user (sanitized), recomputed when it changes (a
    SASL authentication on the connection)."""

    __slots__ = ("principal", "user")

    def __init__(self) -> None:
        self.principal = ""
        self.user = ""

    def of(self, principal: str) -> str:
        if principal != self.principal:
            self.principal = principal
            self.user = sanitize(user_name(principal))
        return self.user


class BusyTime:
    """Awaits a handler's coroutine as a task would, summing the time each of its steps ran
    (``busy_s``): what it cost the event loop, without the time it spent waiting."""

    __slots__ = ("coro", "busy_s")

    def __init__(self, coro: Coroutine[Any, Any, Any]) -> None:
        self.coro = coro
        self.busy_s = 0.0

    def __await__(self) -> Generator[Any, Any, Any]:
        coro = self.coro
        value: Any = None
        error: BaseException | None = None
        while True:
            began = perf_counter()
            try:
                step = coro.send(value) if error is None else coro.throw(error)
            except StopIteration as done:
                self.busy_s += perf_counter() - began
                return done.value
            except BaseException:
                self.busy_s += perf_counter() - began
                raise
            self.busy_s += perf_counter() - began
            value, error = None, None
            try:
                value = yield step
            except BaseException as exc:  # a cancellation, delivered to the handler
                error = exc


def replica_id(api_version: int, request: Any) -> int:
    """A Fetch request's follower id (v15+ in ``replica_state``), -1 for a consumer."""
    if api_version >= 15:
        state = getattr(request, "replica_state", None)
        return int(state.replica_id) if state is not None else -1
    return int(getattr(request, "replica_id", -1))


def fetch_bytes(response: Any) -> int:
    """The record bytes of a Fetch answer (bytes, or regions of the segment files)."""
    if isinstance(response, zero_copy.SplicedResponse):
        response = response.response
    if not isinstance(response, hot_path.FetchResponse):
        return 0
    total = 0
    for topic in response.topics:
        for part in topic.partitions:
            records = part.records
            if records is None:
                continue
            total += len(records) if isinstance(records, bytes | bytearray | memoryview) \
                else int(records.length)  # fmt: skip
    return total


def record(quotas: ClientQuotas, user: str, client_id: str, api_key: int, api_version: int,
           request: Any, response: Any, request_size: int, handler_s: float,
           now_ms: int) -> int:  # fmt: skip
    """Record this request in the quotas it counts for; the throttle time (ms) it earned."""
    if api_key in EXEMPT:
        return 0
    if api_key == FETCH and replica_id(api_version, request) >= 0:
        return 0
    ms = 0
    if quotas.request.enabled:
        ms = quotas.request.record(user, client_id, handler_s * 100.0, now_ms)
        if ms:
            quotas.request.throttled(user, client_id, ms)
    if api_key == PRODUCE:
        if quotas.produce.enabled:
            produce_ms = quotas.produce.record(user, client_id, request_size, now_ms)
            if produce_ms:
                quotas.produce.throttled(user, client_id, produce_ms)
                ms = max(ms, produce_ms)
    elif api_key == FETCH and quotas.fetch.enabled and response is not None:
        fetch_ms = quotas.fetch.record(user, client_id, fetch_bytes(response), now_ms)
        if fetch_ms:
            quotas.fetch.throttled(user, client_id, fetch_ms)
            ms = max(ms, fetch_ms)
    elif api_key in MUTATIONS and response is not None:
        mutation_ms = given_throttle_ms(response)
        if mutation_ms > 0:
            quotas.mutation.throttled(user, client_id, mutation_ms)
            ms = max(ms, mutation_ms)
    return ms


def mutation_quota(ctx: RequestContext) -> MutationQuota:
    """The ``controller_mutation_rate`` of the client sending ``ctx``'s request (a
    CreateTopics, CreatePartitions or DeleteTopics), strict or permissive by its version."""
    clock = ctx.clock
    return MutationQuota(ctx.services.quotas.quotas.mutation, sanitize(user_name(ctx.principal)),
                         ctx.client_id, ctx.api_version >= MUTATIONS[ctx.header.api_key],
                         lambda: int(clock.monotonic() * 1000))  # fmt: skip


def given_throttle_ms(response: Any) -> int:
    """The throttle time a handler put in its (kio) answer."""
    given = getattr(response, "throttle_time", None)
    if isinstance(given, timedelta):
        return round(given.total_seconds() * 1000)
    return int(given or 0)


def with_throttle(api_key: int, api_version: int, response: Any, ms: int) -> Any:
    """``response`` answering with ``throttle_time_ms`` = ``ms`` (a response without the
    field, as Metadata v0-2, is returned as it is)."""
    kind = type(response)
    if kind is OnePartition:
        return hot_path.ProduceResponse(((response.topic, (response.partition,)),), ms)
    if kind is hot_path.ProduceResponse or kind is hot_path.FetchResponse:
        return response._replace(throttle_time_ms=ms)
    if kind is zero_copy.SplicedResponse:
        response.response = response.response._replace(throttle_time_ms=ms)
        return response
    if kind is hot_path.EncodedBody:
        # a cached Metadata body: v3+ begins with throttle_time_ms
        if api_key == METADATA and api_version >= 3:
            return response._replace(data=_I32.pack(ms) + response.data[4:])
        return response
    if hasattr(response, "throttle_time") and dataclasses.is_dataclass(response) \
            and not isinstance(response, type):  # a kio response (every other API)
        return dataclasses.replace(response, throttle_time=timedelta(milliseconds=ms))
    return response
