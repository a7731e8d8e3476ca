"""The transaction admin APIs confluent-kafka lacks (KIP-664), routed as Kafka's Admin client.

* ListTransactions (66) goes to **every broker** of the cluster (each lists the transactional
  ids its coordinator owns); the answers are merged, and a broker that cannot answer is one
  entry of the failures (the caller reports it and lists the others).
* DescribeTransactions (65) goes to each transactional id's **coordinator** (FindCoordinator,
  key type 1), found again on COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR /
  COORDINATOR_NOT_AVAILABLE.
* DescribeProducers (61) and WriteTxnMarkers (27, an operator's abort of a hanging transaction,
  Kafka's ``AbortTransaction``) go to each partition's **leader** (Metadata), asked again with
  fresh metadata on NOT_LEADER_OR_FOLLOWER.

Retries end at ``--timeout`` (:func:`strom.cli.routing.route`). Every failure is a
:class:`strom.cli.errors.CliError` or a failure entry: one line, never a traceback.
"""

from __future__ import annotations

import argparse
from typing import Any

from strom.cli import routing
from strom.cli.clients import admin_client, metadata
from strom.cli.errors import CliError
from strom.cli.wire import part, request
from strom.protocol.errors import ErrorCode

LIST, DESCRIBE, PRODUCERS, MARKERS = 66, 65, 61, 27
TopicPartition = routing.TopicPartition


class Cluster:
    """The brokers one command talks to: Metadata through confluent-kafka (fresh on each
    :meth:`metadata`), the rest through :mod:`strom.cli.wire`."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.admin = admin_client(args, check=False)

    def metadata(self) -> Any:
        return metadata(self.admin, self.args)

    def _candidates(self) -> list[str]:
        """Brokers to ask FindCoordinator: the live ones, the bootstrap servers after them."""
        live = list(routing.addresses(self.metadata()).values())
        boot = [b.strip() for b in self.args.bootstrap_server.split(",") if b.strip()]
        return live + [b for b in boot if b not in live]

    # -- every broker ----------------------------------------------------------------------
    def list_transactions(self) -> tuple[list[tuple[int, Any]], dict[int, str]]:
        """Every broker's transactions as (its id: the coordinator, the listing), by
        transactional id; and the brokers that gave no list, with why."""
        brokers = routing.addresses(self.metadata())

        def lookup(ids: list[int]) -> routing.Lookup[int]:
            return {brokers[i]: [i] for i in ids}, {}

        def send(where: str, ids: list[int]) -> routing.Answers[int]:
            resp = request(where, LIST, 1, state_filters=(), producer_id_filters=(),
                           duration_filter=-1)  # fmt: skip
            return {ids[0]: (int(resp.error_code), resp.transaction_states)}

        done, failed = routing.route(sorted(brokers), lookup, send,
                                     {ErrorCode.coordinator_load_in_progress})  # fmt: skip
        states: list[tuple[int, Any]] = []
        for broker_id, (code, answer) in sorted(done.items()):
            if code != 0:
                failed[broker_id] = ErrorCode(code).name.upper()
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
            return routing.coordinators(candidates, routing.TRANSACTION_KEY, ids)

        def send(where: str, ids: list[str]) -> routing.Answers[str]:
            resp = request(where, DESCRIBE, 0, transactional_ids=tuple(ids))
            return {
                str(s.transactional_id): (int(s.error_code), s) for s in resp.transaction_states
            }

        done, failed = routing.route(txn_ids, lookup, send, routing.COORDINATOR_RETRIABLE)
        routing.first_failure(failed, lambda i: f"cannot describe transactional id {i!r}")
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
                raise CliError(f"broker {broker} is not in the cluster")
            retriable = retriable - {ErrorCode.not_leader_or_follower}

            def lookup(pending: list[TopicPartition]) -> routing.Lookup[TopicPartition]:
                return {where: pending}, {}

        done, failed = routing.route(keys, lookup, send, retriable)
        routing.first_failure(failed, lambda k: f"cannot {what} {k[0]}-{k[1]}")
        for (name, index), (code, _answer) in sorted(done.items()):
            if code != 0:
                raise CliError(f"cannot {what} {name}-{index}: {ErrorCode(code).name.upper()}")
        return {k: answer for k, (_code, answer) in done.items()}

    def describe_producers(
        self, keys: list[TopicPartition], broker: int | None = None
    ) -> dict[TopicPartition, list[Any]]:
        """Each partition's active producers, from its leader (or from ``broker``)."""

        def send(where: str, batch: list[TopicPartition]) -> routing.Answers[TopicPartition]:
            topics = _topics(PRODUCERS, 0, "TopicRequest", "partition_indexes", batch)
            resp = request(where, PRODUCERS, 0, topics=topics)
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
            resp = request(where, MARKERS, 1, markers=(marker,))
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
