"""A partition leader asks another broker's transaction coordinator about a transactional batch.

KIP-890 part 1 (Kafka 3.6's ``AddPartitionsToTxnManager``): before appending a transactional
batch that would open a transaction in a partition, the leader checks that the partition is
in the producer's ongoing transaction. When this broker is the coordinator of the batch's
transactional id, the produce handler asks its own coordinator; otherwise it comes here, and
one AddPartitionsToTxn v4 ``verify_only`` request goes to the coordinator (the leader of the
id's ``__transaction_state`` partition in the metadata cache), one connection per coordinator
broker. Without it a late batch of an ended transaction (a zombie's retry after the commit)
opens a transaction in that partition that no coordinator will ever end, holding its last
stable offset back for good.

The leader's answer, per partition (Kafka's ``AddPartitionsToTxnManager`` and
``ReplicaManager.appendRecords`` mapping, :func:`produce_code`): NONE (append);
INVALID_PRODUCER_EPOCH when the coordinator says PRODUCER_FENCED (another instance bumped the
epoch: every client treats it as fatal for a transactional producer); INVALID_TXN_STATE (the
partition is not part of the producer's ongoing transaction); INVALID_PRODUCER_ID_MAPPING as
is; NOT_ENOUGH_REPLICAS (retriable for every client, as Kafka maps them for produce) when there
is no coordinator to ask, it did not answer, is loading, is not the coordinator any more or is
ending the transaction (CONCURRENT_TRANSACTIONS).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from kio.schema.add_partitions_to_txn.v4 import request as aptx

from strom.broker import internal_topics
from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.messages import build
from strom.replication.connection import BrokerConnection, BrokerConnectionError
from strom.replication.peers import PeerConnections

if TYPE_CHECKING:
    from strom.broker.txn.coordinator import TransactionCoordinator
    from strom.replication.metadata_cache import MetadataCache

log = logging.getLogger(__name__)
E = ErrorCode
TopicPartition = tuple[str, int]
API_KEY = 24
VERSION = 4
TIMEOUT_S = 10.0
#: the coordinator's retriable answers, which older clients do not retry on a produce
_RETRIABLE = (E.concurrent_transactions, E.network_exception, E.coordinator_load_in_progress,
              E.coordinator_not_available, E.not_coordinator)  # fmt: skip


class TxnVerifier:
    """AddPartitionsToTxn v4 ``verify_only`` to remote transaction coordinators."""

    def __init__(self, cache: MetadataCache, source_host: str | None) -> None:
        self.cache = cache
        self._peers = PeerConnections(cache, "strom-txn-verify", source_host)

    async def verify(self, coordinator: TransactionCoordinator, txn_id: str, producer_id: int,
                     producer_epoch: int, partitions: list[TopicPartition],
                     ) -> dict[TopicPartition, ErrorCode]:  # fmt: skip
        """Each partition's produce error code (NONE: in the ongoing transaction)."""
        state = self.cache.partition(internal_topics.TXN_TOPIC, coordinator.partition_for(txn_id))
        if state is None or state.leader < 0:
            return {tp: E.not_enough_replicas for tp in partitions}
        try:
            conn = self._connection(state.leader)
            response = await conn.send(API_KEY, VERSION, _request(txn_id, producer_id,
                                                                  producer_epoch, partitions),
                                       TIMEOUT_S)  # fmt: skip
        except (BrokerConnectionError, OSError, KafkaError, TimeoutError) as exc:
            log.info("verifying %r with broker %d failed: %s", txn_id, state.leader, exc)
            return {tp: E.not_enough_replicas for tp in partitions}
        codes = {tp: E.not_enough_replicas for tp in partitions}  # unanswered: retriable
        if int(response.error_code) != 0:
            return codes
        for result in response.results_by_transaction:
            for topic in result.topic_results:
                for p in topic.results_by_partition:
                    tp = (str(topic.name), int(p.partition_index))
                    if tp in codes:
                        codes[tp] = produce_code(E(int(p.partition_error_code)))
        return codes

    def _connection(self, broker_id: int) -> BrokerConnection:
        return self._peers.get(broker_id)

    def close(self) -> None:
        self._peers.close()


def produce_code(code: ErrorCode) -> ErrorCode:
    """A coordinator's verification answer as the produce error code of the partition."""
    if code == E.producer_fenced:
        return E.invalid_producer_epoch  # what producers expect of a partition (Kafka's rule)
    if code == E.transaction_abortable:
        return E.invalid_txn_state  # clients before transaction version 2
    if code in _RETRIABLE:
        return E.not_enough_replicas
    return code


def _request(txn_id: str, producer_id: int, producer_epoch: int,
             partitions: list[TopicPartition]) -> Any:  # fmt: skip
    topics: dict[str, list[int]] = {}
    for topic, index in partitions:
        topics.setdefault(topic, []).append(index)
    return build(aptx.AddPartitionsToTxnRequest, transactions=(build(
        aptx.AddPartitionsToTxnTransaction, transactional_id=txn_id, producer_id=producer_id,
        producer_epoch=producer_epoch, verify_only=True,
        topics=tuple(build(aptx.AddPartitionsToTxnTopic, name=t, partitions=tuple(ps))
                     for t, ps in topics.items())),))  # fmt: skip
