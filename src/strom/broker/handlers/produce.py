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
at the request's timeout; a leadership lost meanwhile answers only once the records' fate is
known, not NOT_LEADER_OR_FOLLOWER at once as Kafka does: that module says why). v10+ carries KIP-951's leader hints: a partition answered
NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH names the leader this broker knows (the newer
epoch of its own replica's LeaderAndIsr and of the metadata cache: right after a controlled
shutdown the LeaderAndIsr that made this broker a follower comes before the UpdateMetadata)
with that leader's endpoint, so the producer moves at once instead of asking Metadata, which
could still name this broker, and waiting for its next periodic refresh; v12 (KIP-890
transaction version 2) changes nothing while strom does not finalize the
``transaction.version`` feature; v13 names topics by id (UNKNOWN_TOPIC_ID when none has it).

One path for every Produce request: the connection hands this handler a
:class:`~strom.protocol.produce_request.ProduceRequest` whether it read a one-partition request
without ``kio`` or decoded another one with it (:mod:`strom.broker.connection`). The handler is
a plain function: it answers at once when nothing has to wait (nearly every acks=1 request,
answered by the connection right where the bytes arrived) and returns a coroutine otherwise;
the answer of one partition without error is written from the connection's response template.

Authorization (with an authorizer only; without one the cost is one attribute test): a request
with transactional batches needs WRITE on its transactional id (else the whole request is
TRANSACTIONAL_ID_AUTHORIZATION_FAILED), and each topic WRITE (else its partitions are
TOPIC_AUTHORIZATION_FAILED, whether the topic exists or not, and nothing is appended to them).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Coroutine
from concurrent.futures import Future
from time import perf_counter
from typing import Any

from strom.broker import authz, dispatch
from strom.broker.context import RequestContext
from strom.broker.services import BrokerServices
from strom.broker.txn.verification import produce_code
from strom.metadata.topics import INTERNAL_TOPICS
from strom.protocol import record_batch as rb
from strom.protocol.errors import ErrorCode, KafkaError, error_code_of
from strom.protocol.hot_path import ProducePartition, ProduceResponse
from strom.protocol.produce_fast import OnePartition
from strom.protocol.produce_request import ProduceRequest
from strom.replication.partition import Partition
from strom.replication.replica_manager import ReplicaManager
from strom.storage.errors import RecordValidationError
from strom.storage.log import AppendResult, Log

API_KEY = 0
_new = tuple.__new__  # a NamedTuple from a plain tuple (per request: no keyword handling)
#: another broker's coordinator's verification of the request's transactional batches
Remote = dict[tuple[str, int], ErrorCode]
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


async def _verify_remote(ctx: RequestContext, request: ProduceRequest
                         ) -> dict[tuple[str, int], ErrorCode]:  # fmt: skip
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
    version = ctx.header.api_version
    for name, topic_id, index, records in request.partitions():
        name = _topic_name(ctx, version, name, topic_id)
        if name is None:
            continue
        try:
            log_ = services.replicas.leader_partition(name, index).log
        except Exception:  # not the leader, unknown: _append_one answers that
            continue
        opens = _opens_transaction(log_, records or b"")
        if opens is not None:
            wanted.setdefault(opens, []).append((name, index))
    codes: dict[tuple[str, int], ErrorCode] = {}
    for (pid, epoch), tps in wanted.items():
        codes.update(await verifier.verify(coordinator, txn_id, pid, epoch, tps))
    return codes


def _append_one(services: BrokerServices, topic: str, index: int, records: bytes | None, acks: int,
                durable: list[Future[None]], replicated: list[_Waiter], later: list[_Later],
                remote: dict[tuple[str, int], ErrorCode] | None = None,
                txn_id: str | None = None) -> ProducePartition:  # fmt: skip
    info = services.topics.get(topic)
    if info is None or index not in info.replicas:
        return _partition(services, index, ErrorCode.unknown_topic_or_partition)
    if topic in INTERNAL_TOPICS:  # info.is_internal, without the call (per request)
        return _partition(
            services, index, ErrorCode.invalid_topic_exception,
            error_message=f"{topic} is an internal topic",
        )
    if not records:
        return _partition(services, index, ErrorCode.corrupt_message, error_message="no records")
    metrics = services.metrics
    counters = metrics.topics.get(topic) or metrics.topic(topic)  # no call once it exists
    counters.produce_requests += 1
    try:
        replicas = services.replicas
        part = replicas.leader_partition(topic, index)
        if acks == -1:
            replicas.check_min_isr(part)
        if len(records) > _ATTRS_LOW_BYTE and records[_ATTRS_LOW_BYTE] & rb.TRANSACTIONAL_BIT:
            _verify_transaction(services, part.log, topic, index, records, txn_id, remote or {})
        waiting = replicas.waiting_appends  # replicas.must_wait(part), inline (per request;
        if part.log.speed.slow or (waiting and part.key in waiting):  # no hash when empty)
            # a slow disk: written off the loop, answered once it is part of the log
            placeholder = _new(ProducePartition, (index, 0, -1, -1, -1, None, (), None))
            later.append(_Later(replicas.append_later(part, records), placeholder, part, topic,
                                records))  # fmt: skip
            return placeholder
        result = replicas.append_to(part, records)
    except Exception as exc:
        return _refused(services, counters, topic, index, records, exc)
    return _appended(services, counters, part, topic, index, records, result, acks, durable,
                     replicated)  # fmt: skip


def _appended(services: BrokerServices, counters: Any, part: Partition, topic: str, index: int,
              records: bytes, result: AppendResult, acks: int, durable: list[Future[None]],
              replicated: list[_Waiter]) -> ProducePartition:  # fmt: skip
    """The answer of a partition whose batch is in the log (``result``), appended at once or
    after a slow disk: counted, and waited for as ``acks`` asks (``durable``: the fsync of
    flush.messages; ``replicated``: acks=all, once the ISR has it, through
    strom.replication.delayed_produce)."""
    if result.flushed is not None:  # flush.messages reached: answer once it is on disk
        durable.append(result.flushed)
    if not result.duplicate:  # a retried batch already counted
        counters.messages_in += result.record_count
        counters.bytes_in += len(records)
        counters.value_bytes_in += result.value_bytes
    answer: ProducePartition = _new(ProducePartition, (
        index, 0, result.base_offset, result.log_append_time, result.log_start_offset, None, (),
        None))  # fmt: skip
    if acks == -1 and part.log.high_watermark <= result.last_offset:
        future = services.replicas.delayed.watch((topic, index), result.last_offset,
                                                 outlive_leadership=True)
        replicated.append(_Waiter(future, answer))
    return answer


def _refused(services: BrokerServices, counters: Any, topic: str, index: int, records: bytes,
             exc: Exception) -> ProducePartition:  # fmt: skip
    """The answer of a partition whose append raised ``exc``."""
    counters.failed_produce_requests += 1
    counters.bytes_rejected += len(records)
    if isinstance(exc, RecordValidationError):  # KIP-467: the client fails only these records
        return _partition(services, index, exc.error_code, error_message=str(exc)[:500],
                          record_errors=exc.record_errors)  # fmt: skip
    code = error_code_of(exc)
    if code == ErrorCode.unknown_server_error:
        log.error("append to %s-%s failed", topic, index, exc_info=exc)
    return _partition(services, index, code, error_message=str(exc)[:500])


class _Later:
    """A partition's append waiting for a slow disk
    (:meth:`strom.replication.replica_manager.ReplicaManager.append_later`): ``answer`` is
    the placeholder in the response, replaced once the append is done."""

    __slots__ = ("future", "answer", "part", "topic", "records")

    def __init__(self, future: asyncio.Future[AppendResult], answer: ProducePartition,
                 part: Partition, topic: str, records: bytes) -> None:  # fmt: skip
        self.future = future
        self.answer = answer
        self.part = part
        self.topic = topic
        self.records = records


async def _appended_later(services: BrokerServices, item: _Later, acks: int,
                          durable: list[Future[None]], replicated: list[_Waiter]) -> ProducePartition:  # fmt: skip
    """The answer of an append :class:`_Later` waited for: as :func:`_append_one`'s, once the
    batch is in the log (never before: acks=1 means written, acks=all replicated past it)."""
    index, records = item.answer[0], item.records
    counters = services.metrics.topic(item.topic)
    try:
        result = await item.future
    except Exception as exc:
        return _refused(services, counters, item.topic, index, records, exc)
    return _appended(services, counters, item.part, item.topic, index, records, result, acks,
                     durable, replicated)  # fmt: skip


def _forget_later(later: list[_Later]) -> None:
    """acks=0: nobody waits for the appends :class:`_Later` queued (they are written all the
    same); their errors are only logged."""

    def done(future: asyncio.Future[AppendResult]) -> None:
        if not future.cancelled() and future.exception() is not None:
            log.debug("an acks=0 append failed: %s", future.exception())

    for item in later:
        item.future.add_done_callback(done)


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


def _topic_name(ctx: RequestContext, version: int, name: str | None,
                topic_id: uuid.UUID | None) -> str | None:  # fmt: skip
    """The topic's name; v13+ names topics by id (None when no topic has that id)."""
    if version < 13:
        return name
    info = ctx.topics.by_id(topic_id) if topic_id else None
    return info.name if info is not None else None


@dispatch.handler(API_KEY, 3, 13, advertise_min=0)
def handle(ctx: RequestContext, request: ProduceRequest, remote: Remote | None = None,
           ) -> ProduceResponse | OnePartition | Coroutine[Any, Any, Any] | None:  # fmt: skip
    """Append every partition's records and answer, at once when nothing has to wait (the
    connection then answers it without waking its task): the response, None for acks=0, or a
    coroutine giving the response once it can be given (another broker's coordinator verifies
    a transactional batch first; a ``flush.messages`` fsync; acks=all replication).
    ``remote``: that verification's answers, once had."""
    services = ctx.services
    acks = request.acks
    txn_id = request.transactional_id
    if txn_id is not None and remote is None and _verified_remotely(services, request):
        if services.authorizer is not None:
            _check_transactional_id(ctx, request)  # before asking the remote coordinator
        return _verify_then_produce(ctx, request)
    version = ctx.header[1]
    durable: list[Future[None]] = []
    replicated: list[_Waiter] = []
    later: list[_Later] = []
    records = request.records
    secured = services.authorizer is not None  # no authorizer: one test per request, no more
    if (len(records) == 1 and not secured and version < 13 and (acks == 1 or acks == -1)
            and len(request.topics) == 1):  # fmt: skip
        # Nearly every request (a producer with linger.ms=0): the loop below for one
        # partition, without its lists and tests (this runs per request).
        name = request.topics[0][0]
        assert name is not None  # below v13 topics are named, not identified
        part = _append_one(services, name, request.topics[0][2][0], records[0], acks, durable,
                           replicated, later, remote, txn_id)  # fmt: skip
        if durable or replicated or later:
            return _answer_later(ctx, request, [(name, [part], None)], durable, replicated,
                                 later)  # fmt: skip
        if not part[1]:
            return _new(OnePartition, (name, part))
        if version >= LEADER_HINTS_VERSION:
            return _with_leader_hints(services, [(name, [part], None)], ctx.client.listener)
        return _new(ProduceResponse, ([(name, [part], None)], 0, ()))
    responses = []
    valid_acks = acks in (0, 1, -1)
    if secured and remote is None:
        _check_transactional_id(ctx, request)
    i = 0
    for name, topic_id, indexes in request.topics:
        if version >= 13:
            name = _topic_name(ctx, version, name, topic_id)
        denied = secured and name is not None and not authz.authorize(ctx, authz.WRITE,
                                                                      authz.TOPIC, name)  # fmt: skip
        parts = []
        for index in indexes:
            if not valid_acks:
                parts.append(_partition(services, index, ErrorCode.invalid_required_acks))
            elif denied:
                parts.append(_partition(services, index, ErrorCode.topic_authorization_failed))
            elif name is None:
                parts.append(_partition(services, index, ErrorCode.unknown_topic_id))
            else:
                parts.append(_append_one(services, name, index, records[i], acks, durable,
                                         replicated, later, remote, txn_id))  # fmt: skip
            i += 1
        responses.append((name, parts, topic_id))
    if acks == 0:
        _forget_later(later)
        _fail_unanswered([p for _, parts, _ in responses for p in parts])
        return None
    if durable or replicated or later:
        return _answer_later(ctx, request, responses, durable, replicated, later)
    if i == 1 and len(responses) == 1 and not parts[0][1] and version < 13:  # one partition appended: nothing to hint
        return _new(OnePartition, (name, parts[0]))
    if version >= LEADER_HINTS_VERSION:
        return _with_leader_hints(services, responses, ctx.client.listener)
    return _new(ProduceResponse, (responses, 0, ()))


def _check_transactional_id(ctx: RequestContext, request: ProduceRequest) -> None:
    """Kafka's first check of a Produce with transactional batches: WRITE on its transactional
    id, else the whole request is TRANSACTIONAL_ID_AUTHORIZATION_FAILED."""
    if not any(records is not None and len(records) > _ATTRS_LOW_BYTE
               and records[_ATTRS_LOW_BYTE] & rb.TRANSACTIONAL_BIT
               for records in request.records):  # fmt: skip
        return
    txn_id = request.transactional_id
    if txn_id is None or not authz.authorize(ctx, authz.WRITE, authz.TRANSACTIONAL_ID, txn_id):
        raise KafkaError(ErrorCode.transactional_id_authorization_failed,
                         f"not authorized to WRITE transactional id {txn_id}")  # fmt: skip


async def _verify_then_produce(ctx: RequestContext, request: ProduceRequest
                               ) -> ProduceResponse | OnePartition | None:  # fmt: skip
    remote = await _verify_remote(ctx, request) if request.acks in (0, 1, -1) else {}
    answer = handle(ctx, request, remote)
    return await answer if isinstance(answer, Coroutine) else answer


async def _answer_later(ctx: RequestContext, request: ProduceRequest, responses: list[Any],
                        durable: list[Future[None]], replicated: list[_Waiter],
                        later: list[_Later]) -> ProduceResponse:  # fmt: skip
    if later:  # appends written off the loop (a slow disk): their answers replace placeholders
        done = {id(item.answer): await _appended_later(ctx.services, item, request.acks,
                                                       durable, replicated)
                for item in later}  # fmt: skip
        responses = [(name, [done.get(id(p), p) for p in parts], topic_id)
                     for name, parts, topic_id in responses]  # fmt: skip
    for fut in durable:  # the flusher thread fsyncs; the loop serves others meanwhile
        await asyncio.wrap_future(fut)
    if replicated:
        parked = perf_counter()
        outcome = await _wait_replicated(replicated, request.timeout_ms / 1000)
        # Kafka's RemoteTime: acks=all parked in the produce purgatory until the ISR has it
        ctx.remote_time += perf_counter() - parked
        responses = [(name, [p._replace(error_code=outcome[id(p)]) if id(p) in outcome else p
                             for p in parts], topic_id)
                     for name, parts, topic_id in responses]  # fmt: skip
    if ctx.header.api_version >= LEADER_HINTS_VERSION:
        return _with_leader_hints(ctx.services, responses, ctx.client.listener)
    return ProduceResponse(responses)


def _fail_unanswered(parts: list[ProducePartition]) -> None:
    """An acks=0 Produce gets no answer, so a refused partition (corrupt batch, unknown topic,
    not leader...) raises instead: the connection is closed, as Kafka does, and the producer
    learns of the failure (librdkafka reconnects and refreshes its metadata)."""
    for part in parts:
        if part.error_code:
            code = ErrorCode(part.error_code)
            raise KafkaError(code, part.error_message or code.name)


def _verified_remotely(services: BrokerServices, request: ProduceRequest) -> bool:
    """True when the request holds a transactional batch and its transactional id is another
    broker's to coordinate (the verification is a request to that broker:
    :func:`_verify_remote`, before anything is appended)."""
    coordinator = services.transactions.coordinator
    txn_id = request.transactional_id
    if coordinator is None or txn_id is None:
        return False
    if coordinator.ownership(txn_id) != ErrorCode.not_coordinator:
        return False  # this broker's coordinator (or loading it): _verify_transaction asks it
    return any(records is not None and len(records) >= rb.HEADER_SIZE
               and records[_ATTRS_LOW_BYTE] & rb.TRANSACTIONAL_BIT
               for records in request.records)  # fmt: skip


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


def _with_leader_hints(services: BrokerServices, responses: list[Any],
                       listener: str = "") -> ProduceResponse:  # fmt: skip
    """KIP-951: the current leader of every partition that was refused for leadership, and
    those leaders' endpoints on the client's ``listener``."""
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
        return _new(ProduceResponse, (responses, 0, ()))
    cache = services.replicas.cache
    on = (cache.broker_on(node_id, listener) for node_id in sorted(leaders))
    endpoints = [(b.node_id, b.host, b.port, b.rack) for b in on if b is not None]
    return ProduceResponse(hinted, node_endpoints=endpoints)
