"""Produce (key 0): append producers' record batches, as bytes, to partition logs.

Advertised from v0 (librdkafka enables compression only when the broker lists Produce v0+);
versions 0–2 (message formats v0/v1) are refused, since only record batch v2 is stored. Each
partition's records are validated by the log as a client append (one batch, magic, CRC-32C,
size, every record, producer sequence; :mod:`strom.storage.batch_validation`), so one bad
partition gets its error code while the others are appended. Records refused one by one (null
keys on compacted topics, timestamps out of range) are named in ``record_errors`` with
``error_message`` (KIP-467). A transactional batch must belong to its producer's ongoing
transaction with that partition added (KIP-890's verification: INVALID_TXN_STATE when it is
not, INVALID_PRODUCER_EPOCH when a newer instance fenced the producer, see
:func:`strom.broker.txn.verification.produce_code`): asked of this broker's transaction
coordinator, or, when the request's transactional id is another
broker's, of that coordinator with AddPartitionsToTxn v4 (:mod:`strom.broker.txn.verification`)
before anything is appended.
acks=0 gets no response at all, as Kafka's protocol says. Only the partition's leader appends
(NOT_LEADER_OR_FOLLOWER elsewhere). acks=all checks ``min.insync.replicas`` against the ISR
first (NOT_ENOUGH_REPLICAS) and answers once the high watermark passes the records
(:mod:`strom.replication.delayed_produce`: NOT_ENOUGH_REPLICAS_AFTER_APPEND, or REQUEST_TIMED_OUT
at the request's timeout). v10+ carries KIP-951's leader hints: a partition answered
NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH names the leader this broker knows (the newer
epoch of its own replica's LeaderAndIsr and of the metadata cache: right after a controlled
shutdown the LeaderAndIsr that made this broker a follower comes before the UpdateMetadata)
with that leader's endpoint, so the producer moves at once instead of asking Metadata, which
could still name this broker, and waiting for its next periodic refresh; v12 (KIP-890
transaction version 2) changes nothing while strom does not finalize the
``transaction.version`` feature; v13 names topics by id (UNKNOWN_TOPIC_ID when none has it).
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import Future
from typing import Any

from strom.broker import dispatch
from strom.broker.context import RequestContext
from strom.broker.services import BrokerServices
from strom.broker.single_produce import NOT_SINGLE
from strom.broker.txn.verification import produce_code
from strom.protocol import record_batch as rb
from strom.protocol.errors import ErrorCode, KafkaError, error_code_of
from strom.protocol.hot_path import ProducePartition, ProduceResponse, produce_frame
from strom.protocol.produce_fast import ResponseTemplate, SingleProduce
from strom.replication.replica_manager import ReplicaManager
from strom.storage.errors import RecordValidationError
from strom.storage.log import Log

API_KEY = 0
_ATTRS_LOW_BYTE = 22  # the low byte of the batch's int16 attributes (bytes 21-22)
log = logging.getLogger(__name__)


def _partition(services: BrokerServices, index: int, code: ErrorCode, **values: Any) -> ProducePartition:
    # A plain tuple, encoded by strom.protocol.hot_path: kio's generic build + encode of this
    # response cost more than appending the records it acknowledges. Only errors come here.
    services.metrics.request_error(API_KEY, code)
    return ProducePartition(
        index,
        code,
        values.get("base_offset", -1),
        values.get("log_append_time", -1),
        values.get("log_start_offset", -1),
        values.get("error_message"),
        tuple(values.get("record_errors", ())),  # (batch index, message)
    )


def _opens_transaction(log_: Log, records: bytes) -> tuple[int, int] | None:
    """(producer id, epoch) of a transactional batch that would open a transaction in this
    partition, else None (nearly every batch: no header parse for it)."""
    if len(records) < rb.HEADER_SIZE or not records[_ATTRS_LOW_BYTE] & rb.TRANSACTIONAL_BIT:
        return None
    header = rb.parse_header(records)
    if not header.is_transactional or header.is_control or header.producer_id < 0:
        return None
    entry = log_.producer_state.producers.get(header.producer_id)
    if entry is not None and entry.txn_first_offset >= 0 and entry.epoch == header.producer_epoch:
        return None  # already part of this producer's open transaction here
    return header.producer_id, header.producer_epoch


def _verify_transaction(services: BrokerServices, log_: Log, topic: str, index: int, records: bytes,
                        txn_id: str | None, remote: dict[tuple[str, int], ErrorCode]) -> None:  # fmt: skip
    """A transactional batch that would open a transaction in this partition must belong to
    its producer's ongoing transaction, with this partition added (KIP-890's verification):
    a late batch of an ended or aborted transaction would otherwise start a transaction no
    coordinator knows of, and hold the last stable offset back for good. ``remote``: the
    answers of another broker's coordinator (:func:`_verify_remote`)."""
    tp = (topic, index)
    code = remote.get(tp)
    if code is None:
        opens = _opens_transaction(log_, records)
        if opens is None:
            return
        coordinator = services.transactions.active()
        if txn_id is not None and coordinator.ownership(txn_id) != ErrorCode.not_coordinator:
            code = produce_code(coordinator.verify(txn_id, *opens, [tp])[tp])
        elif coordinator.owns_all or coordinator.knows_producer(opens[0]):
            code = produce_code(coordinator.verify_producer(*opens, tp))
        else:
            return  # no transactional id to find its coordinator by (a raw request)
    if code != ErrorCode.none:
        raise KafkaError(code, _VERIFY_MESSAGES.get(code, "The transaction coordinator "
                                                    "refused the batch"))  # fmt: skip


_VERIFY_MESSAGES = {
    ErrorCode.invalid_txn_state: "Partition was not added to the transaction",
    ErrorCode.invalid_producer_epoch: "Producer's epoch is older than the transactional id's: "
                                      "fenced by a newer instance",
    ErrorCode.not_enough_replicas: "Unable to verify the partition has been added to the "
                                   "transaction",
}  # fmt: skip


async def _verify_remote(ctx: RequestContext, request: Any) -> dict[tuple[str, int], ErrorCode]:
    """The verification of the request's transactional batches by their coordinator when it is
    another broker (:mod:`strom.broker.txn.verification`), before anything is appended."""
    txn_id = request.transactional_id
    if txn_id is None:
        return {}
    services = ctx.services
    try:
        coordinator = services.transactions.active()
    except KafkaError:
        return {}
    verifier = services.transactions.verifier
    if coordinator.ownership(txn_id) != ErrorCode.not_coordinator:
        return {}  # this broker's coordinator (or loading it): checked in _verify_transaction
    wanted: dict[tuple[int, int], list[tuple[str, int]]] = {}
    for topic_data in request.topic_data:
        name = _topic_name(ctx, topic_data)
        if name is None:
            continue
        for pdata in topic_data.partition_data:
            try:
                log_ = services.replicas.leader_partition(name, pdata.index).log
            except Exception:  # not the leader, unknown: _append_one answers that
                continue
            opens = _opens_transaction(log_, pdata.records or b"")
            if opens is not None:
                wanted.setdefault(opens, []).append((name, int(pdata.index)))
    codes: dict[tuple[str, int], ErrorCode] = {}
    for (pid, epoch), tps in wanted.items():
        codes.update(await verifier.verify(coordinator, txn_id, pid, epoch, tps))
    return codes


def _append_one(services: BrokerServices, topic: str, index: int, records: bytes | None, acks: int,
                durable: list[Future[None]], replicated: list[_Waiter],
                remote: dict[tuple[str, int], ErrorCode] | None = None,
                txn_id: str | None = None) -> ProducePartition:  # fmt: skip
    info = services.topics.get(topic)
    if info is None or index not in info.replicas:
        return _partition(services, index, ErrorCode.unknown_topic_or_partition)
    if info.is_internal:
        return _partition(
            services, index, ErrorCode.invalid_topic_exception,
            error_message=f"{topic} is an internal topic",
        )
    if not records:
        return _partition(services, index, ErrorCode.corrupt_message, error_message="no records")
    counters = services.metrics.topic(topic)
    counters.produce_requests += 1
    try:
        replicas = services.replicas
        part = replicas.leader_partition(topic, index)
        if acks == -1:
            replicas.check_min_isr(part)
        _verify_transaction(services, part.log, topic, index, records, txn_id, remote or {})
        result = replicas.append_to(part, bytes(records))
        if result.flushed is not None:  # flush.messages reached: answer once it is on disk
            durable.append(result.flushed)
    except RecordValidationError as exc:  # KIP-467: the client fails only these records
        counters.failed_produce_requests += 1
        counters.bytes_rejected += len(records)
        return _partition(services, index, exc.error_code, error_message=str(exc)[:500],
                          record_errors=exc.record_errors)  # fmt: skip
    except Exception as exc:
        code = error_code_of(exc)
        if code == ErrorCode.unknown_server_error:
            log.exception("append to %s-%s failed", topic, index)
        counters.failed_produce_requests += 1
        counters.bytes_rejected += len(records)
        return _partition(services, index, code, error_message=str(exc)[:500])
    if not result.duplicate:  # a retried batch already counted
        counters.messages_in += result.record_count
        counters.bytes_in += len(records)
        counters.value_bytes_in += result.value_bytes
    answer = ProducePartition(
        index, 0, result.base_offset, result.log_append_time, result.log_start_offset
    )
    if acks == -1 and part.log.high_watermark <= result.last_offset:
        # acks=all: answered once the ISR has it (strom.replication.delayed_produce)
        future = replicas.delayed.watch((topic, index), result.last_offset)
        replicated.append(_Waiter(future, answer))
    return answer


class _Waiter:
    """An acks=all partition answer waiting for replication; ``answer`` is replaced by the
    outcome (the offsets stay, the error code is the delayed produce's)."""

    __slots__ = ("future", "answer")

    def __init__(self, future: asyncio.Future[ErrorCode], answer: ProducePartition) -> None:
        self.future = future
        self.answer = answer


async def _wait_replicated(waiters: list[_Waiter], timeout_s: float) -> dict[int, ErrorCode]:
    """id(answer) -> error code of each waiter (REQUEST_TIMED_OUT when not done in time)."""
    futures = [w.future for w in waiters]
    if timeout_s > 0:
        await asyncio.wait(futures, timeout=timeout_s)
    outcome = {}
    for w in waiters:
        if w.future.done():
            outcome[id(w.answer)] = w.future.result()
        else:
            w.future.cancel()
            outcome[id(w.answer)] = ErrorCode.request_timed_out
    return outcome


def _topic_name(ctx: RequestContext, topic_data: Any) -> str | None:
    """The topic's name; v13+ names topics by id (None when no topic has that id)."""
    if ctx.api_version < 13:
        return str(topic_data.name)
    info = ctx.topics.by_id(topic_data.topic_id) if topic_data.topic_id else None
    return info.name if info is not None else None


@dispatch.handler(API_KEY, 3, 13, advertise_min=0)
async def handle(ctx: RequestContext, request: Any) -> Any:
    acks = int(request.acks)
    durable: list[Future[None]] = []
    replicated: list[_Waiter] = []
    remote = await _verify_remote(ctx, request) if acks in (0, 1, -1) else {}
    responses = []
    for topic_data in request.topic_data:
        name = _topic_name(ctx, topic_data)
        parts = []
        for pdata in topic_data.partition_data:
            if acks not in (0, 1, -1):
                parts.append(_partition(ctx.services, pdata.index, ErrorCode.invalid_required_acks))
            elif name is None:
                parts.append(_partition(ctx.services, pdata.index, ErrorCode.unknown_topic_id))
            else:
                parts.append(_append_one(ctx.services, name, pdata.index, pdata.records, acks,
                                         durable, replicated, remote,
                                         request.transactional_id))  # fmt: skip
        responses.append((name, parts, getattr(topic_data, "topic_id", None)))
    if acks == 0:
        _fail_unanswered([p for _, parts, _ in responses for p in parts])
        return None
    for fut in durable:  # the flusher thread fsyncs; the loop serves others meanwhile
        await asyncio.wrap_future(fut)
    if replicated:
        outcome = await _wait_replicated(replicated, request.timeout.total_seconds())
        responses = [(name, [p._replace(error_code=outcome[id(p)]) if id(p) in outcome else p
                             for p in parts], topic_id)
                     for name, parts, topic_id in responses]  # fmt: skip
    if ctx.api_version >= LEADER_HINTS_VERSION:
        return _with_leader_hints(ctx.services, responses)
    return ProduceResponse(responses)


def _fail_unanswered(parts: list[ProducePartition]) -> None:
    """An acks=0 Produce gets no answer, so a refused partition (corrupt batch, unknown topic,
    not leader...) raises instead: the server closes the connection, as Kafka does, and the
    producer learns of the failure (librdkafka reconnects and refreshes its metadata)."""
    for part in parts:
        if part.error_code:
            code = ErrorCode(part.error_code)
            raise KafkaError(code, part.error_message or code.name)


# The single-partition fast path ----------------------------------------------------------------
# A request of one topic and one partition (nearly every request of a producer with
# linger.ms=0), read by strom.protocol.produce_fast from the frame, goes through the same
# _append_one as above and is answered from a ResponseTemplate: no kio objects, no
# RequestContext, no coroutine unless it has to wait (a flush.messages fsync, acks=all).

_MAX_TEMPLATES = 4096  # per connection; cleared when full (a producer writing many partitions)


def produce_single(services: BrokerServices, version: int, request: SingleProduce,
                   templates: dict[tuple[int, str, int], ResponseTemplate],
                   ) -> object:  # fmt: skip
    """Answer ``request`` as :func:`handle` answers the same request: the response frame,
    ``None`` for acks=0, :data:`NOT_SINGLE` for a transactional batch another broker's
    coordinator must verify, or a coroutine returning the frame once the append is durable /
    replicated. Raises ``KafkaError`` only for a failed acks=0 request (the caller closes the
    connection, as Kafka does)."""
    acks = request.acks
    if request.transactional_id is not None and _verified_elsewhere(services, request):
        return NOT_SINGLE  # the generic path asks the other broker's coordinator first
    durable: list[Future[None]] = []
    replicated: list[_Waiter] = []
    try:
        if acks in (1, -1, 0):
            part = _append_one(services, request.topic, request.partition, request.records, acks,
                               durable, replicated, None, request.transactional_id)  # fmt: skip
        else:
            part = _partition(services, request.partition, ErrorCode.invalid_required_acks)
    except Exception as exc:  # the handler boundary (server.py answers the generic path's)
        code = error_code_of(exc)
        log.error("produce to %s-%s failed: %s: %s", request.topic, request.partition,
                  type(exc).__name__, exc)  # fmt: skip
        if acks == 0:
            raise KafkaError(code, f"acks=0 produce failed: {exc}") from exc
        part = _partition(services, request.partition, code, error_message=str(exc) or code.name)
    if acks == 0:
        _fail_unanswered([part])
        return None
    if durable or replicated:
        return _single_later(services, version, request, part, templates, durable, replicated)
    return _single_frame(services, version, request, part, templates)


def _verified_elsewhere(services: BrokerServices, request: SingleProduce) -> bool:
    """True for a transactional batch whose transactional id another broker coordinates (its
    verification is a request to that broker: :func:`_verify_remote`, on the generic path)."""
    records = request.records
    if len(records) < rb.HEADER_SIZE or not records[_ATTRS_LOW_BYTE] & rb.TRANSACTIONAL_BIT:
        return False
    try:
        coordinator = services.transactions.active()
    except KafkaError:
        return False
    assert request.transactional_id is not None
    return coordinator.ownership(request.transactional_id) == ErrorCode.not_coordinator


async def _single_later(services: BrokerServices, version: int, request: SingleProduce, part: ProducePartition,
                        templates: dict[tuple[int, str, int], ResponseTemplate],
                        durable: list[Future[None]], replicated: list[_Waiter]) -> bytes:  # fmt: skip
    for fut in durable:
        await asyncio.wrap_future(fut)
    if replicated:
        outcome = await _wait_replicated(replicated, request.timeout_ms / 1000)
        part = part._replace(error_code=outcome[id(part)])
    return _single_frame(services, version, request, part, templates)


def _single_frame(services: BrokerServices, version: int, request: SingleProduce, part: ProducePartition,
                  templates: dict[tuple[int, str, int], ResponseTemplate]) -> bytes:  # fmt: skip
    if part.error_code or part.error_message is not None or part.record_errors:
        responses = [(request.topic, [part], None)]
        return produce_frame(version, request.correlation_id, ProduceResponse(responses)
                             if version < LEADER_HINTS_VERSION
                             else _with_leader_hints(services, responses))  # fmt: skip
    key = (version, request.topic, request.partition)
    template = templates.get(key)
    if template is None:
        if len(templates) >= _MAX_TEMPLATES:
            templates.clear()
        template = templates[key] = ResponseTemplate(version, request.topic, request.partition)
    return template.frame(request.correlation_id, part.base_offset, part.log_append_time,
                          part.log_start_offset)  # fmt: skip


LEADER_HINTS_VERSION = 10
_MOVED = (ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch)


def current_leader(replicas: ReplicaManager, topic: str, index: int) -> tuple[int, int] | None:
    """(leader id, leader epoch) of the partition as this broker knows it, other than itself:
    the newer of its replica's state (LeaderAndIsr) and the metadata cache (UpdateMetadata);
    None when neither names a live other broker."""
    best = (-1, -1)
    part = replicas.partitions.get((topic, index))
    if part is not None:
        best = (part.leader_id, part.leader_epoch)
    cached = replicas.cache.partition(topic, index)
    if cached is not None and cached.leader_epoch > best[1]:
        best = (cached.leader, cached.leader_epoch)
    if best[0] < 0 or best[0] == replicas.node_id or replicas.cache.broker(best[0]) is None:
        return None
    return best


def _with_leader_hints(services: BrokerServices, responses: list[Any]) -> ProduceResponse:
    """KIP-951: the current leader of every partition that was refused for leadership, and
    those leaders' endpoints."""
    leaders: set[int] = set()
    hinted = []
    for name, parts, topic_id in responses:
        if name is not None and any(p.error_code in _MOVED for p in parts):
            new_parts = []
            for p in parts:
                found = current_leader(services.replicas, name, p.partition_index) if (
                    p.error_code in _MOVED) else None  # fmt: skip
                if found is not None:
                    leaders.add(found[0])
                    p = p._replace(current_leader=found)
                new_parts.append(p)
            parts = new_parts
        hinted.append((name, parts, topic_id))
    if not leaders:
        return ProduceResponse(responses)
    cache = services.replicas.cache
    endpoints = [(b.node_id, b.host, b.port, b.rack) for b in map(cache.broker, sorted(leaders))
                 if b is not None]  # fmt: skip
    return ProduceResponse(hinted, node_endpoints=endpoints)
