"""Executor side: the at-least-once sink's plain rows as record batches, over strom's codec.

The sink's common shape (a ``value`` column, perhaps a ``key`` column, every row to the
``topic`` option, the partitioner's choice) needs no Python per row:
:func:`strom.protocol.records.encode_rows` turns an Arrow batch's key and value buffers into
record batches in one native pass, partitioned as the Java client partitions keys (murmur2,
which librdkafka's ``murmur2_random`` partitioner also uses), and :class:`BatchSender` sends
them as Produce requests, one per leader at a time, over :class:`strom.spark.wire.Connection`
(TLS and SASL PLAIN/SCRAM, as the source's connections). The source reads raw batches through
the same codec for the same reason (issue 20): librdkafka costs about a microsecond of the
calling thread per record, more than the rest of the sink.

Pipelined: :meth:`BatchSender.submit` sends an Arrow batch's records and returns without
waiting for the answer; the answer is read when the next Arrow batch has been encoded (just
before its records are sent) or by :meth:`BatchSender.flush` at the end of the task. So the
broker appends batch N while Spark hands the sink batch N+1 and it is encoded, where a
synchronous send left both sides waiting for each other in turn. One request stays in flight
per leader, and so one batch per partition: with two in flight, a retriable refusal of the
first (or a connection broken under it) could let the second be written before the first is
sent again, and what one partition receives would leave row order (Kafka's producer keeps
order with several in flight only through idempotence's sequence numbers, which this path
does not use).

What it honours, as librdkafka would for these settings:

- ``acks`` / ``request.required.acks`` (default all; 0 is not served here, see
  :func:`eligible`), ``request.timeout.ms`` (30 s, the broker's wait for acks=all);
- ``message.timeout.ms`` / ``delivery.timeout.ms`` (300 s): retriable errors
  (:data:`RETRIABLE`, a broken connection) are retried with the leader looked up again, until
  then (counted from the rows' :meth:`~BatchSender.submit`); past it the task fails with
  ``_MSG_TIMED_OUT``;
- ``max.in.flight.requests.per.connection`` / ``max.in.flight`` (1,000,000): never more than
  one request is in flight per connection here, within any value it may have;
- ``message.max.bytes`` (1,000,000): a record too large for it fails the task with
  ``MSG_SIZE_TOO_LARGE`` before anything of the Arrow batch is sent, as librdkafka refuses it
  in ``produce()``; ``batch.size`` (1,000,000) caps a batch;
- ``topic.metadata.refresh.interval.ms`` (300 s): partitions added meanwhile are used after it.

Rows with a null key go to one partition per Arrow batch, the next one each time (Java's sticky
partitioner, KIP-480, sticks to a partition per batch; librdkafka's ``murmur2_random`` picks
one at random per record). Delivery is at-least-once, as on the librdkafka path it replaces
(where ``enable.idempotence`` is false by default): a request retried after its answer was lost
may be written twice; what one partition receives stays in row order (one request in flight
per partition, a batch retried before the next is sent).

Exceptions are ``KafkaException`` as confluent-kafka raises them, so the sink's callers and
messages do not depend on which path wrote.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from confluent_kafka import KafkaError, KafkaException

from strom.admin.wire import part
from strom.protocol import records
from strom.protocol.errors import ErrorCode
from strom.protocol.records import encode_rows
from strom.spark.wire import (
    Connection,
    WireError,
    any_server,
    topic_metadata,
    wire_security,
)

PRODUCE, PRODUCE_VERSION = 0, 9

#: errors after which a batch is sent again (to the leader looked up again): Kafka's retriable
#: produce errors
RETRIABLE = frozenset({
    ErrorCode.unknown_topic_or_partition, ErrorCode.leader_not_available,
    ErrorCode.not_leader_or_follower, ErrorCode.request_timed_out, ErrorCode.network_exception,
    ErrorCode.not_enough_replicas, ErrorCode.not_enough_replicas_after_append,
    ErrorCode.kafka_storage_error, ErrorCode.fenced_leader_epoch,
    ErrorCode.unknown_leader_epoch, ErrorCode.corrupt_message,
})  # fmt: skip
RETRY_BACKOFF_S = 0.1

#: librdkafka settings this path honours (module doc) or that do not change what is written:
#: with any other, the sink produces through confluent-kafka, which honours everything
_SETTINGS = frozenset({
    "bootstrap.servers", "client.id", "partitioner", "acks", "request.required.acks",
    "request.timeout.ms", "message.timeout.ms", "delivery.timeout.ms", "message.max.bytes",
    "batch.size", "linger.ms", "queue.buffering.max.ms", "queue.buffering.max.messages",
    "queue.buffering.max.kbytes", "retries", "message.send.max.retries", "retry.backoff.ms",
    "topic.metadata.refresh.interval.ms", "socket.timeout.ms", "security.protocol",
    "compression.type", "compression.codec", "enable.idempotence",
    "max.in.flight.requests.per.connection", "max.in.flight",
})  # fmt: skip
_SECURITY_PREFIXES = ("ssl.", "sasl.")


def eligible(config: Mapping[str, Any], topic: str | None) -> bool:
    """Whether rows with only key and value columns may go through :class:`BatchSender`:
    a topic option, no setting outside :data:`_SETTINGS` (or TLS/SASL's), the Java-compatible
    partitioner, acks not 0, no compression, no idempotence, and security strom's own
    connections can speak; and the native record codec (its pure-Python fallback encodes
    about eight times slower than librdkafka's ``produce()``)."""
    if not topic or records.IMPLEMENTATION != "native":
        return False
    for name in config:
        if name not in _SETTINGS and not name.startswith(_SECURITY_PREFIXES):
            return False
    if str(config.get("partitioner", "murmur2_random")) != "murmur2_random":
        return False
    if _acks(config) == 0:
        return False  # no answer to wait for: librdkafka's fire-and-forget
    for name in ("compression.type", "compression.codec"):
        if str(config.get(name, "none")).lower() != "none":
            return False
    if str(config.get("enable.idempotence", "false")).lower() in ("true", "1"):
        return False
    try:
        wire_security(config)
    except ValueError:
        return False
    return True


def _acks(config: Mapping[str, Any]) -> int:
    raw = str(config.get("acks", config.get("request.required.acks", "all"))).strip().lower()
    return -1 if raw == "all" else int(raw)


def _ms(config: Mapping[str, Any], names: tuple[str, ...], default: int) -> int:
    for name in names:
        if name in config:
            return int(config[name])
    return default


def sendable(array: pa.Array) -> bool:
    """Whether ``array`` is a column :func:`encode_rows` reads: binary or string (large
    ones too, cast first). The driver checks the sink's schema; this keeps any other column
    off the codec's buffers all the same."""
    kind = array.type
    return bool(pa.types.is_binary(kind) or pa.types.is_string(kind)
                or pa.types.is_large_binary(kind) or pa.types.is_large_string(kind))


def _arrow_buffers(array: pa.Array) -> tuple[Any, Any, Any, int, int]:
    """The ``ArrowBinary`` tuple :func:`encode_rows` reads: validity, offsets, data, offset,
    length (a string column is read as its UTF-8 bytes)."""
    if pa.types.is_large_binary(array.type) or pa.types.is_large_string(array.type):
        array = array.cast(pa.binary())
    validity, offsets, data = array.buffers()[:3]
    return (validity, offsets, data if data is not None else b"", array.offset, len(array))


@dataclass
class _Queued:
    batch: bytes  # one record batch of one partition
    deadline: float  # monotonic time: delivery.timeout.ms after its rows were submitted


@dataclass
class _Request:
    """A Produce request in flight to one leader: the batch of each partition it carries."""

    conn: Connection
    correlation: int
    batches: dict[int, _Queued]


@dataclass
class _Leaders:
    partitions: int
    leader_of: dict[int, int]  # partition -> broker id
    addresses: dict[int, str]  # broker id -> host:port
    fetched_at: float


class BatchSender:
    """Sends Arrow rows to one topic as record batches (module doc); keeps its connections
    and the topic's metadata between calls (the sink keeps it with its producer)."""

    def __init__(self, config: Mapping[str, Any], topic: str) -> None:
        self.topic = topic
        self.security = wire_security(config)
        self.bootstrap = [a.strip() for a in str(config["bootstrap.servers"]).split(",")
                          if a.strip()]  # fmt: skip
        self.client_id = str(config.get("client.id", "strom-spark-sink"))
        self.acks = _acks(config)
        self.request_timeout_ms = _ms(config, ("request.timeout.ms",), 30_000)
        self.delivery_timeout_s = _ms(config, ("delivery.timeout.ms", "message.timeout.ms"),
                                      300_000) / 1000  # fmt: skip
        self.refresh_s = _ms(config, ("topic.metadata.refresh.interval.ms",), 300_000) / 1000
        self.max_message_bytes = _ms(config, ("message.max.bytes",), 1_000_000)
        self.max_batch_bytes = min(_ms(config, ("batch.size",), 1_000_000),
                                   self.max_message_bytes)  # fmt: skip
        self.socket_timeout_s = max(_ms(config, ("socket.timeout.ms",), 60_000),
                                    self.request_timeout_ms + 5_000) / 1000  # fmt: skip
        self._leaders: _Leaders | None = None
        self._connections: dict[int, Connection] = {}
        self._null_key_partition = 0
        #: partition -> its batches not acknowledged and not in flight, in row order
        self._queued: dict[int, deque[_Queued]] = {}
        #: leader -> the one request in flight to it (so one batch in flight per partition)
        self._in_flight: dict[int, _Request] = {}
        #: requests sent again after a retriable error or a broken connection (since created)
        self.retries = 0

    def close(self) -> None:
        """Close the connections; batches submitted and not acknowledged are forgotten (the
        task that submitted them fails)."""
        self._queued.clear()
        self._in_flight.clear()
        for conn in self._connections.values():
            conn.close()
        self._connections.clear()

    # -- sending -------------------------------------------------------------------------
    def send(self, keys: pa.Array | None, values: pa.Array) -> None:
        """Write every row of ``values`` (with ``keys``, if any); return once each row (and
        every one submitted before) is acknowledged as ``acks`` asks, raise
        ``KafkaException`` if one cannot be."""
        self.submit(keys, values)
        self.flush()

    def submit(self, keys: pa.Array | None, values: pa.Array) -> None:
        """Encode the rows and send what may go now, without waiting for the answer to what
        this call sends (module doc: pipelining); :meth:`flush` waits for every answer. Raises
        ``KafkaException`` for a record larger than ``message.max.bytes`` (nothing of these rows
        is sent) and for a refusal, or a timeout, of rows submitted before."""
        if not len(values):
            return
        deadline = time.monotonic() + self.delivery_timeout_s
        leaders = self._metadata(deadline)
        null_partition = self._null_key_partition % leaders.partitions
        self._null_key_partition = null_partition + 1
        batches = encode_rows(None if keys is None else _arrow_buffers(keys),
                              _arrow_buffers(values), leaders.partitions, null_partition,
                              int(time.time() * 1000), self.max_batch_bytes)  # fmt: skip
        for partition, chunks in batches.items():
            for batch in chunks:
                if len(batch) > self.max_message_bytes:
                    raise KafkaException(KafkaError(
                        KafkaError.MSG_SIZE_TOO_LARGE,
                        f"{self.topic}-{partition}: a record of {len(batch)} bytes as a batch "
                        f"is larger than message.max.bytes ({self.max_message_bytes})"))
        for partition, chunks in batches.items():
            self._queued.setdefault(partition, deque()).extend(
                _Queued(batch, deadline) for batch in chunks)
        self._advance()

    def flush(self) -> None:
        """Return once every submitted row is acknowledged; raise ``KafkaException`` if one is
        refused or not acknowledged within ``delivery.timeout.ms`` of its submission."""
        while self._queued or self._in_flight:
            self._advance()

    def _advance(self) -> None:
        """Receive the answer to every request in flight, then send each partition's next
        batch (one request per leader). A retriable failure is retried here, after a backoff
        and a new metadata lookup, until the oldest unacknowledged batch's deadline."""
        failure = self._complete()
        while True:
            if failure:
                oldest = min((q[0].deadline for q in self._queued.values() if q), default=None)
                if oldest is not None and time.monotonic() >= oldest:
                    self.close()  # the task fails: what is not acknowledged is forgotten
                    raise KafkaException(KafkaError(
                        KafkaError._MSG_TIMED_OUT,
                        f"{self.topic}: records not acknowledged within "
                        f"{self.delivery_timeout_s:g} s (last error: {failure})"))
                self.retries += 1
                time.sleep(RETRY_BACKOFF_S)
                try:
                    self._metadata(oldest if oldest is not None else time.monotonic(),
                                   refresh=True)  # fmt: skip
                except KafkaException:
                    self.close()  # the task fails: what is not acknowledged is forgotten
                    raise
            failure = self._dispatch()
            if not failure:
                return

    def _dispatch(self) -> str:
        """Send the first queued batch of every partition that has none in flight, one request
        per leader that has none in flight. Returns the last failure ("" if none): a partition
        without a known leader, a connection that could not be made or broke."""
        leaders = self._leaders
        assert leaders is not None  # submit() looked the topic up
        by_leader: dict[int, list[int]] = {}
        failure = ""
        for partition, queue in self._queued.items():
            leader = leaders.leader_of.get(partition, -1)
            if leader < 0 or leader not in leaders.addresses:
                failure = f"{self.topic}-{partition}: no leader"
                continue
            if queue and leader not in self._in_flight:
                by_leader.setdefault(leader, []).append(partition)
        for leader, partitions in by_leader.items():
            batches = {p: self._queued[p].popleft() for p in partitions}
            for p in partitions:
                if not self._queued[p]:
                    del self._queued[p]
            try:
                conn = self._connection(leader, leaders.addresses[leader])
                correlation = self._send_produce(conn, batches)
            except WireError as exc:
                self._drop(leader)
                self._requeue(batches)
                failure = str(exc)
                continue
            self._in_flight[leader] = _Request(conn, correlation, batches)
        return failure

    def _complete(self) -> str:
        """Receive the answer to every request in flight: acknowledged batches are done,
        the others queued again in front of their partition's later batches. Returns the last
        retriable failure ("" if none); raises on a fatal one (after forgetting every batch:
        the task fails, and a task retried writes its rows again)."""
        failure = ""
        for leader in list(self._in_flight):
            request = self._in_flight.pop(leader)
            try:
                answers = self._receive_produce(request)
            except WireError as exc:
                self._drop(leader)
                self._requeue(request.batches)
                failure = str(exc)
                continue
            retry: dict[int, _Queued] = {}
            for partition, queued in request.batches.items():
                code, message = answers.get(partition, (ErrorCode.network_exception,
                                                        "no answer for the partition"))
                if code == ErrorCode.none:
                    continue
                if code in RETRIABLE:
                    failure = f"{self.topic}-{partition}: {code.name.upper()}"
                    retry[partition] = queued
                    continue
                self.close()  # the task fails: what is not acknowledged is forgotten
                raise KafkaException(KafkaError(
                    int(code), f"{self.topic}-{partition}: {code.name.upper()}"
                    + (f": {message}" if message else "")))
            if retry:
                self._drop(leader)  # a moved leader: connect again after the lookup
                self._requeue(retry)
        return failure

    def _requeue(self, batches: dict[int, _Queued]) -> None:
        """Put batches not acknowledged back in front of their partitions' queues: each was
        its partition's first unacknowledged one, so the partition's order is kept."""
        for partition, queued in batches.items():
            self._queued.setdefault(partition, deque()).appendleft(queued)

    def _connection(self, leader: int, address: str) -> Connection:
        conn = self._connections.get(leader)
        if conn is None:
            conn = Connection(address, self.socket_timeout_s, self.client_id, self.security)
            self._connections[leader] = conn
        return conn

    def _send_produce(self, conn: Connection, batches: dict[int, _Queued]) -> int:
        data = part(PRODUCE, PRODUCE_VERSION, "TopicProduceData", name=self.topic,
                    partition_data=tuple(
                        part(PRODUCE, PRODUCE_VERSION, "PartitionProduceData", index=p,
                             records=queued.batch) for p, queued in batches.items()))  # fmt: skip
        return conn.send(PRODUCE, PRODUCE_VERSION, transactional_id=None, acks=self.acks,
                         timeout=self.request_timeout_ms, topic_data=(data,))  # fmt: skip

    def _receive_produce(self, request: _Request) -> dict[int, tuple[ErrorCode, str]]:
        response = request.conn.receive(PRODUCE, PRODUCE_VERSION, request.correlation)
        answers: dict[int, tuple[ErrorCode, str]] = {}
        for topic in response.responses:
            if str(topic.name) != self.topic:
                continue
            for p in topic.partition_responses:
                answers[int(p.index)] = (ErrorCode(p.error_code), str(p.error_message or ""))
        return answers

    def _drop(self, leader: int) -> None:
        conn = self._connections.pop(leader, None)
        if conn is not None:
            conn.close()

    # -- metadata ------------------------------------------------------------------------
    def _metadata(self, deadline: float, refresh: bool = False) -> _Leaders:
        """The topic's partitions and leaders: kept for ``topic.metadata.refresh.interval.ms``
        unless ``refresh``; asked again (auto-creation allowed, as librdkafka's producer asks)
        until the topic has partitions, or the delivery deadline passes."""
        known = self._leaders
        if known is not None and not refresh and time.monotonic() - known.fetched_at < self.refresh_s:
            return known
        last = ""
        while True:
            try:
                found = self._ask_metadata()
                if found is not None:
                    self._leaders = found
                    return found
                last = f"{self.topic}: no partitions yet"
            except (WireError, KafkaException) as exc:
                last = str(exc)
                if isinstance(exc, KafkaException) and not _retriable(exc):
                    raise
            if time.monotonic() >= deadline:
                raise KafkaException(KafkaError(KafkaError._MSG_TIMED_OUT,
                                                f"metadata of {self.topic}: {last}"))  # fmt: skip
            time.sleep(RETRY_BACKOFF_S)

    def _ask_metadata(self) -> _Leaders | None:
        conn = any_server(self.bootstrap, self.socket_timeout_s, self.client_id, self.security)
        try:
            response = topic_metadata(conn, self.topic, auto_create=True)
        finally:
            conn.close()
        addresses = {int(b.node_id): f"{b.host}:{int(b.port)}" for b in response.brokers}
        for topic in response.topics:
            if str(topic.name) != self.topic:
                continue
            code = ErrorCode(topic.error_code)
            if code in RETRIABLE:
                return None
            if code != ErrorCode.none:
                raise KafkaException(KafkaError(int(code),
                                                f"metadata of {self.topic}: {code.name.upper()}"))
            if not topic.partitions:
                return None
            leader_of = {int(p.partition_index): int(p.leader_id) for p in topic.partitions}
            return _Leaders(len(leader_of), leader_of, addresses, time.monotonic())
        return None


def _retriable(exc: KafkaException) -> bool:
    error = exc.args[0] if exc.args else None
    return isinstance(error, KafkaError) and error.code() in {int(c) for c in RETRIABLE}
