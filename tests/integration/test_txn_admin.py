"""Operators' view of transactions: ListTransactions, DescribeTransactions, DescribeProducers
and WriteTxnMarkers through ``strom txn list|describe|find-hanging|abort``, and
``strom consume --isolation-level read_committed``."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Producer

from tests.integration.cli_helpers import Cli
from tests.integration.clients import create_topic
from tests.integration.txn_helpers import list_latest, read_to_end


def _producer(bootstrap: str, txn_id: str) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5})
    p.init_transactions(30)
    return p


@pytest.mark.slow  # a dozen CLI processes
def test_txn_cli_lists_describes_finds_and_aborts(broker, topic_name) -> None:
    cli = Cli(broker.bootstrap)
    create_topic(broker.bootstrap, topic_name, partitions=2)
    txn_id = f"{topic_name}-tx"
    p = _producer(broker.bootstrap, txn_id)
    p.begin_transaction()
    p.produce(topic_name, value=b"committed", partition=0)
    p.commit_transaction(30)
    p.begin_transaction()
    p.produce(topic_name, value=b"stuck", partition=1)
    p.flush(30)

    listed = {t["transactional_id"]: t for t in json.loads(cli.ok("txn", "list", "--format", "json"))}
    assert listed[txn_id]["state"] == "Ongoing"
    desc = json.loads(cli.ok("txn", "describe", txn_id, "--format", "json"))
    assert desc["state"] == "Ongoing" and desc["partitions"] == [f"{topic_name}-1"]
    assert desc["producer_id"] == listed[txn_id]["producer_id"] and desc["producer_epoch"] == 0
    assert desc["timeout_ms"] == 60000 and desc["start_time_ms"] > 0
    assert "TRANSACTIONAL-ID" in cli.ok("txn", "describe", txn_id)
    assert "TRANSACTIONAL_ID_NOT_FOUND" in cli.fail("txn", "describe", "no-such-id")

    # the coordinator knows this transaction: not hanging, unless open "too long"
    assert json.loads(cli.ok("txn", "find-hanging", "--topic", topic_name, "--format", "json")) == []
    hanging = json.loads(cli.ok("txn", "find-hanging", "--topic", topic_name,
                                "--max-transaction-timeout", "0", "--format", "json"))  # fmt: skip
    assert [(h["partition"], h["producer_id"], h["start_offset"]) for h in hanging] == [
        (1, desc["producer_id"], 0)]  # fmt: skip

    assert list_latest(broker.bootstrap, topic_name, 1, 1) == 0
    out = cli.ok("txn", "abort", "--topic", topic_name, "--partition", "1", "--start-offset", "0")
    assert "aborted" in out
    assert list_latest(broker.bootstrap, topic_name, 1, 1) == 2  # the LSO moved past it
    assert read_to_end(broker.bootstrap, topic_name, [1], "read_committed") == []
    assert "no open transaction" in cli.fail("txn", "abort", "--topic", topic_name,
                                             "--partition", "1", "--start-offset", "0")  # fmt: skip

    committed = cli.lines("consume", topic_name, "--from-beginning", "--isolation-level",
                          "read_committed", "--timeout-ms", "3000")  # fmt: skip
    assert committed == ["committed"]
    everything = cli.lines("consume", topic_name, "--from-beginning", "--timeout-ms", "3000")
    assert sorted(everything) == ["committed", "stuck"]
