"""Transactions (KIP-664), as ``kafka-transactions.sh``: the admin APIs confluent-kafka lacks,
routed as Kafka's Admin client, and what the tool builds on them (hanging transactions).

* ListTransactions (66) goes to **every broker** of the cluster (each lists the transactional
  ids its coordinator owns); the answers are merged, and a broker that cannot answer is one
  entry of the failures (the caller reports it and lists the others).
* DescribeTransactions (65) goes to each transactional id's **coordinator** (FindCoordinator,
  key type 1), found again on COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR /
  COORDINATOR_NOT_AVAILABLE.
* DescribeProducers (61) and WriteTxnMarkers (27, an operator's abort of a hanging transaction,
  Kafka's ``AbortTransaction``) go to each partition's **leader** (Metadata), asked again with
  fresh metadata on NOT_LEADER_OR_FOLLOWER.

Retries end at the session's timeout (:func:`strom.admin.routing.route`). Every failure is an
:class:`~strom.admin.errors.AdminError` or a failure entry: one line, never a traceback.

A transaction is *hanging* (:func:`find_hanging`) when a partition's producer has an open
transaction that its coordinator does not know as ongoing with that partition and epoch, or
that has been open longer than the transaction timeout given (Kafka's default 15 minutes);
:meth:`Transactions.abort` writes an ABORT marker for one (WriteTxnMarkers).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from strom.admin import routing
from strom.admin.errors import InvalidInputError, NotFoundError, RefusedError
from strom.admin.session import Session
from strom.admin.wire import error_name, part, request
from strom.protocol.errors import ErrorCode

LIST, DESCRIBE, PRODUCERS, MARKERS = 66, 65, 61, 27
TopicPartition = routing.TopicPartition


class Transactions:
    """The brokers one session talks to: Metadata through confluent-kafka (fresh on each
    :meth:`metadata`), the rest through :mod:`strom.admin.wire`."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def metadata(self) -> Any:
        return self.session.metadata()

    def _request(self, where: str, api_key: int, version: int, **fields: Any) -> Any:
        return request(where, api_key, version, wait_s=self.session.timeout, **fields)

    def _candidates(self) -> list[str]:
        """Brokers to ask FindCoordinator: the live ones, the bootstrap servers after them."""
        live = list(routing.addresses(self.metadata()).values())
        boot = [b.strip() for b in self.session.bootstrap.split(",") if b.strip()]
        return live + [b for b in boot if b not in live]

    # -- every broker ----------------------------------------------------------------------
    def list_transactions(self) -> tuple[list[tuple[int, Any]], dict[int, str]]:
        """Every broker's transactions as (its id: the coordinator, the listing), by
        transactional id; and the brokers that gave no list, with why."""
        brokers = routing.addresses(self.metadata())

        def lookup(ids: list[int]) -> routing.Lookup[int]:
            return {brokers[i]: [i] for i in ids}, {}

        def send(where: str, ids: list[int]) -> routing.Answers[int]:
            resp = self._request(where, LIST, 1, state_filters=(), producer_id_filters=(),
                                 duration_filter=-1)  # fmt: skip
            return {ids[0]: (int(resp.error_code), resp.transaction_states)}

        done, failed = routing.route(sorted(brokers), lookup, send,
                                     {ErrorCode.coordinator_load_in_progress},
                                     self.session.timeout)  # fmt: skip
        states: list[tuple[int, Any]] = []
        for broker_id, (code, answer) in sorted(done.items()):
            if code != 0:
                failed[broker_id] = error_name(code)
            else:
                states.extend((broker_id, s) for s in answer)
        failures = {i: f"broker {i} ({brokers[i]}): {why}" for i, why in sorted(failed.items())}
        return sorted(states, key=lambda s: str(s[1].transactional_id)), failures

    # -- coordinators ----------------------------------------------------------------------
    def describe_transactions(self, txn_ids: list[str]) -> dict[str, Any]:
        """Each id's TransactionState from its coordinator (its error code for the caller to
        check: TRANSACTIONAL_ID_NOT_FOUND ...); no coordinator answering in time is an error."""
        if not txn_ids:
            return {}
        candidates = self._candidates()

        def lookup(ids: list[str]) -> routing.Lookup[str]:
            return routing.coordinators(candidates, routing.TRANSACTION_KEY, ids,
                                        self.session.timeout)

        def send(where: str, ids: list[str]) -> routing.Answers[str]:
            resp = self._request(where, DESCRIBE, 0, transactional_ids=tuple(ids))
            return {
                str(s.transactional_id): (int(s.error_code), s) for s in resp.transaction_states
            }

        done, failed = routing.route(txn_ids, lookup, send, routing.COORDINATOR_RETRIABLE,
                                     self.session.timeout)
        routing.first_failure(failed, lambda i: f"cannot describe transactional id {i!r}",
                              self.session.timeout)
        return {i: answer for i, (_code, answer) in done.items()}

    # -- partition leaders -----------------------------------------------------------------
    def _to_leaders(
        self, keys: list[TopicPartition], send: Any, what: str, broker: int | None = None
    ) -> dict[TopicPartition, Any]:
        """Each key's answer from its leader, or from ``broker`` if given (Kafka's
        ``--broker-id``: that broker's replica, and NOT_LEADER_OR_FOLLOWER is then final)."""
        retriable = routing.LEADER_RETRIABLE
        if broker is None:

            def lookup(pending: list[TopicPartition]) -> routing.Lookup[TopicPartition]:
                return routing.leaders(self.metadata(), pending)

        else:
            where = routing.addresses(self.metadata()).get(broker)
            if where is None:
                raise NotFoundError(f"broker {broker} is not in the cluster")
            retriable = retriable - {ErrorCode.not_leader_or_follower}

            def lookup(pending: list[TopicPartition]) -> routing.Lookup[TopicPartition]:
                return {where: pending}, {}

        done, failed = routing.route(keys, lookup, send, retriable, self.session.timeout)
        routing.first_failure(failed, lambda k: f"cannot {what} {k[0]}-{k[1]}",
                              self.session.timeout)
        for (name, index), (code, _answer) in sorted(done.items()):
            if code != 0:
                raise RefusedError(f"cannot {what} {name}-{index}: {error_name(code)}")
        return {k: answer for k, (_code, answer) in done.items()}

    def describe_producers(
        self, keys: list[TopicPartition], broker: int | None = None
    ) -> dict[TopicPartition, list[Any]]:
        """Each partition's active producers, from its leader (or from ``broker``)."""

        def send(where: str, batch: list[TopicPartition]) -> routing.Answers[TopicPartition]:
            topics = _topics(PRODUCERS, 0, "TopicRequest", "partition_indexes", batch)
            resp = self._request(where, PRODUCERS, 0, topics=topics)
            return {(str(t.name), int(p.partition_index)): (int(p.error_code), p.active_producers)
                    for t in resp.topics for p in t.partitions}  # fmt: skip

        return self._to_leaders(keys, send, "describe the producers of", broker)

    def abort(self, key: TopicPartition, producer_id: int, producer_epoch: int,
              coordinator_epoch: int) -> None:  # fmt: skip
        """An ABORT marker for that producer's open transaction, written by the leader."""

        def send(where: str, batch: list[TopicPartition]) -> routing.Answers[TopicPartition]:
            marker = part(MARKERS, 1, "WritableTxnMarker", producer_id=producer_id,
                          producer_epoch=producer_epoch, transaction_result=False,
                          topics=_topics(MARKERS, 1, "WritableTxnMarkerTopic",
                                         "partition_indexes", batch),
                          coordinator_epoch=max(coordinator_epoch, 0))  # fmt: skip
            resp = self._request(where, MARKERS, 1, markers=(marker,))
            return {(str(t.name), int(p.partition_index)): (int(p.error_code), None)
                    for m in resp.markers for t in m.topics for p in t.partitions}  # fmt: skip

        self._to_leaders([key], send, f"abort the transaction of producer {producer_id} in")


def _topics(api_key: int, version: int, cls: str, field: str,
            keys: list[TopicPartition]) -> tuple[Any, ...]:  # fmt: skip
    """``keys`` as the request's per-topic entities (name + that topic's partition indexes)."""
    by_topic: dict[str, list[int]] = {}
    for name, index in keys:
        by_topic.setdefault(name, []).append(index)
    return tuple(part(api_key, version, cls, name=name, **{field: tuple(sorted(ps))})
                 for name, ps in sorted(by_topic.items()))  # fmt: skip


# -- what the tool builds on them ------------------------------------------------------------


def _ms(value: Any) -> int:
    if value is None:
        return -1
    if hasattr(value, "timestamp"):
        return int(value.timestamp() * 1000)
    if hasattr(value, "total_seconds"):
        return int(value.total_seconds() * 1000)
    return int(value)


@dataclass(frozen=True)
class TransactionListing:
    transactional_id: str
    coordinator: int  # the broker that listed it: its coordinator
    producer_id: int
    state: str


@dataclass(frozen=True)
class TransactionDescription:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str
    timeout_ms: int
    start_time_ms: int  # -1: no transaction open
    duration_ms: int
    partitions: list[str]  # topic-partition


@dataclass(frozen=True)
class ProducerState:
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    last_sequence: int
    last_timestamp: int
    current_txn_start_offset: int  # -1: no open transaction


@dataclass(frozen=True)
class OpenTransaction:
    """A producer's open transaction in one partition (from the partition's leader);
    ``duration_min`` is how long since its last write, in whole minutes."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    start_offset: int
    last_timestamp: int
    duration_min: int


def list_transactions(session: Session) -> tuple[list[TransactionListing], dict[int, str]]:
    """Every broker's transactions, and the brokers that gave no list with why."""
    states, failures = Transactions(session).list_transactions()
    return [TransactionListing(s.transactional_id, broker, s.producer_id, s.transaction_state)
            for broker, s in states], failures  # fmt: skip


def describe_transaction(session: Session, transactional_id: str) -> TransactionDescription:
    """One transactional id, from its coordinator."""
    s = Transactions(session).describe_transactions([transactional_id])[transactional_id]
    if int(s.error_code) != 0:
        raise RefusedError(f"cannot describe transactional id {transactional_id!r}: "
                           f"{error_name(s.error_code)}")  # fmt: skip
    start = _ms(s.transaction_start_time)
    start = start if start > 0 else -1  # 0: no transaction open (the broker cannot send -1)
    return TransactionDescription(
        transactional_id=s.transactional_id, producer_id=s.producer_id,
        producer_epoch=s.producer_epoch, state=s.transaction_state,
        timeout_ms=_ms(s.transaction_timeout), start_time_ms=start,
        duration_ms=int(time.time() * 1000) - start if start >= 0 else -1,
        partitions=[f"{t.topic}-{p}" for t in s.topics for p in t.partitions],
    )  # fmt: skip


def describe_producers(session: Session, topic: str, partition: int,
                       broker: int | None = None) -> list[ProducerState]:  # fmt: skip
    """The partition leader's (or ``broker``'s replica's) active producers."""
    key = (topic, partition)
    return [ProducerState(s.producer_id, s.producer_epoch, s.coordinator_epoch, s.last_sequence,
                          s.last_timestamp, s.current_txn_start_offset)
            for s in Transactions(session).describe_producers([key], broker)[key]]  # fmt: skip


def open_transactions(txns: Transactions, topic: str | None, partition: int | None = None
                      ) -> list[OpenTransaction]:  # fmt: skip
    """The producers with an open transaction in ``topic`` (default: every non-internal
    topic; only ``partition`` if given), each asked of its partition's leader."""
    md = txns.metadata()
    topics = [t for name, t in sorted(md.topics.items())
              if (topic is None or name == topic) and not name.startswith("__")]  # fmt: skip
    if topic is not None and not topics:
        raise NotFoundError(f"topic {topic!r} does not exist")
    keys = [(t.topic, p) for t in topics for p in sorted(t.partitions)
            if partition is None or p == partition]  # fmt: skip
    if partition is not None and not keys:
        raise NotFoundError(f"partition {topic}-{partition} does not exist")
    now = int(time.time() * 1000)
    out = []
    for (name, index), producers in sorted(txns.describe_producers(keys).items()):
        for s in producers:
            if s.current_txn_start_offset >= 0:
                out.append(OpenTransaction(
                    name, index, s.producer_id, s.producer_epoch, s.coordinator_epoch,
                    s.current_txn_start_offset, s.last_timestamp,
                    max(0, now - s.last_timestamp) // 60_000))  # fmt: skip
    return out


def find_hanging(session: Session, topic: str | None, max_minutes: int) -> list[OpenTransaction]:
    """Open transactions no coordinator will end (see the module docstring). A partial list
    of transactional ids is refused: an id missing from it would look hanging."""
    txns = Transactions(session)
    candidates = open_transactions(txns, topic)
    listed, failures = txns.list_transactions()
    if failures:
        raise RefusedError(f"cannot list transactions on {next(iter(failures.values()))}")
    by_pid = {s.producer_id: s.transactional_id for _broker, s in listed}
    ids = {by_pid[c.producer_id] for c in candidates if c.producer_id in by_pid}
    states = txns.describe_transactions(sorted(ids))
    hanging = []
    for c in candidates:
        s = states.get(by_pid.get(c.producer_id, ""))
        known = (s is not None and s.transaction_state == "Ongoing"
                 and s.producer_epoch == c.producer_epoch
                 and any(t.topic == c.topic and c.partition in t.partitions
                         for t in s.topics))  # fmt: skip
        if not known or c.duration_min >= max_minutes:
            hanging.append(c)
    return hanging


def abort(session: Session, topic: str, partition: int, *, start_offset: int | None = None,
          producer_id: int | None = None, producer_epoch: int | None = None) -> tuple[int, int]:
    """Abort the open transaction starting at ``start_offset`` of the partition, or that of
    ``producer_id``/``producer_epoch``; the (producer id, epoch) aborted."""
    txns = Transactions(session)
    pid, epoch, coordinator_epoch = producer_id, producer_epoch, -1
    if start_offset is not None:
        match = [c for c in open_transactions(txns, topic, partition)
                 if c.start_offset == start_offset]  # fmt: skip
        if not match:
            raise NotFoundError(f"no open transaction starts at offset {start_offset} of "
                                f"{topic}-{partition}")  # fmt: skip
        pid, epoch = match[0].producer_id, match[0].producer_epoch
        coordinator_epoch = match[0].coordinator_epoch
    elif pid is None or epoch is None:
        raise InvalidInputError("give --start-offset, or --producer-id and --producer-epoch")
    txns.abort((topic, partition), pid, epoch, coordinator_epoch)
    return pid, epoch
