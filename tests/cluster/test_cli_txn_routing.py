"""``strom txn`` on a 3-broker cluster, bootstrapped with broker 1 only, for a transactional id
whose coordinator is another broker and a partition broker 1 does not host at all: every
request must go where Kafka's Admin client sends it (ListTransactions to every broker,
DescribeTransactions to the coordinator, DescribeProducers and the abort's WriteTxnMarkers to
the leader). An open transaction is listed, described, its producer shown on the partition,
then aborted by an operator; a read_committed consumer then reads past it: exactly the
committed records and those written after, in order. A broker that cannot answer the list is
one stderr line, the others' transactions are still listed."""

from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path
from typing import Any

import pytest

from strom.testing.zookeeper import zookeeper_available
from tests.integration.cli_helpers import Cli, assert_clean_error

READY = zookeeper_available() and importlib.util.find_spec("strom.controller") is not None
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not READY, reason="needs ZooKeeper and cluster mode"),
]
TOPIC = "routed"


def coordinator_of(bootstrap: str, txn_ids: list[str], timeout: float = 30.0) -> dict[str, int]:
    """FindCoordinator (v4, key type 1) asked of one broker until it names each id's node."""
    from strom.admin import wire

    deadline = time.monotonic() + timeout
    while True:
        resp = wire.request(bootstrap, 10, 4, key_type=1, coordinator_keys=tuple(txn_ids))
        found = {str(c.key): int(c.node_id) for c in resp.coordinators if int(c.error_code) == 0}
        if len(found) == len(txn_ids):
            return found
        assert time.monotonic() < deadline, f"no coordinator for {txn_ids} within {timeout}s"
        time.sleep(0.3)


def read(bootstrap: str, partition: int, isolation: str) -> list[bytes]:
    from tests.integration.txn_helpers import read_to_end

    return [m.value() for m in read_to_end(bootstrap, TOPIC, [partition], isolation)]


def test_txn_commands_reach_the_coordinator_and_the_leader(tmp_path: Path) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import NewTopic

    from strom.testing.cluster import _CLIENT_LOG, ClusterProcess

    settings = {"auto.leader.rebalance.enable": "false",
                "transaction.state.log.num.partitions": "6"}  # fmt: skip
    # a session long enough that the broker paused below stays in the metadata while the CLI
    # (its start-up included, slow on a loaded machine) asks it: the test is about the CLI
    with ClusterProcess(tmp_path, brokers=3, settings=settings,
                        session_timeout_ms=30_000) as cluster:  # fmt: skip
        # partition 0 on brokers 2 and 3 (led by 2), never on broker 1
        new = NewTopic(TOPIC, num_partitions=1, replication_factor=-1, replica_assignment=[[2, 3]])
        admin = cluster.admin()
        admin.create_topics([new], request_timeout=30)[TOPIC].result(30)
        assert cluster.wait_for_leader(TOPIC, 0) == 2
        first = cluster.broker(1).bootstrap
        candidates = [f"routed-tx-{i}" for i in range(12)]
        coordinators = coordinator_of(first, candidates)
        txn_id = next(i for i in candidates if coordinators[i] != 1)  # 6 partitions on 3 brokers

        p: Any = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": txn_id,
                           "acks": "all", "linger.ms": 5, "logger": _CLIENT_LOG})  # fmt: skip
        p.init_transactions(30)
        p.begin_transaction()
        committed = [b"c%d" % i for i in range(5)]
        for value in committed:
            p.produce(TOPIC, value, partition=0)
        p.commit_transaction(30)  # offsets 0-4, its COMMIT marker at 5
        p.begin_transaction()
        for i in range(3):
            p.produce(TOPIC, b"h%d" % i, partition=0)
        assert p.flush(30) == 0  # offsets 6-8: open, the last stable offset stays at 6

        cli = Cli(first)  # broker 1 is neither the coordinator nor a replica of the partition
        listed = {t["transactional_id"]: t
                  for t in json.loads(cli.ok("txn", "list", "--format", "json"))}  # fmt: skip
        assert listed[txn_id]["state"] == "Ongoing", listed
        assert listed[txn_id]["coordinator"] == coordinators[txn_id] != 1
        pid = listed[txn_id]["producer_id"]
        desc = json.loads(cli.ok("txn", "describe", txn_id, "--format", "json"))
        assert (desc["state"], desc["partitions"], desc["producer_id"]) == (
            "Ongoing", [f"{TOPIC}-0"], pid)  # fmt: skip
        producers = json.loads(cli.ok("txn", "describe-producers", "--topic", TOPIC,
                                      "--partition", "0", "--format", "json"))  # fmt: skip
        assert [(s["producer_id"], s["current_txn_start_offset"]) for s in producers] == [(pid, 6)]
        follower = json.loads(cli.ok("txn", "describe-producers", "--topic", TOPIC, "--partition",
                                     "0", "--broker-id", "3", "--format", "json"))  # fmt: skip
        assert [(s["producer_id"], s["current_txn_start_offset"]) for s in follower] == [(pid, 6)]
        line = cli.fail("txn", "describe-producers", "--topic", TOPIC, "--partition", "0",
                        "--broker-id", "1", "--timeout", "2")  # fmt: skip
        assert "UNKNOWN_TOPIC_OR_PARTITION" in line, line  # broker 1 has no replica of it
        hanging = json.loads(cli.ok("txn", "find-hanging", "--topic", TOPIC,
                                    "--max-transaction-timeout", "0", "--format", "json"))  # fmt: skip
        assert [(h["partition"], h["producer_id"], h["start_offset"]) for h in hanging] == [
            (0, pid, 6)]  # fmt: skip
        assert read(cluster.bootstrap, 0, "read_committed") == committed  # held back at 6

        out = cli.ok("txn", "abort", "--topic", TOPIC, "--partition", "0", "--start-offset", "6")
        assert f"aborted the transaction of producer {pid}" in out
        after = [b"a%d" % i for i in range(3)]
        plain = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                          "logger": _CLIENT_LOG})  # fmt: skip
        for value in after:
            plain.produce(TOPIC, value, partition=0)
        assert plain.flush(30) == 0
        assert read(cluster.bootstrap, 0, "read_committed") == committed + after
        assert read(cluster.bootstrap, 0, "read_uncommitted") == (
            committed + [b"h0", b"h1", b"h2"] + after)  # fmt: skip
        producers = json.loads(cli.ok("txn", "describe-producers", "--topic", TOPIC,
                                      "--partition", "0", "--format", "json"))  # fmt: skip
        assert [s["current_txn_start_offset"] for s in producers if s["producer_id"] == pid] == [-1]

        # a broker that cannot answer: reported on one line, the others' list still printed
        silent = next(b for b in (2, 3) if b != coordinators[txn_id])
        cluster.pause(silent)
        try:
            proc = cli.run("txn", "list", "--format", "json", "--timeout", "3")
        finally:
            cluster.resume(silent)
        line = assert_clean_error(proc)
        assert line.startswith(f"cannot list transactions on broker {silent} "), line
        assert txn_id in {t["transactional_id"] for t in json.loads(proc.stdout)}
        p.abort_transaction(30)  # the coordinator's own abort: nothing left open there
        assert read(cluster.bootstrap, 0, "read_committed") == committed + after
        del p, plain, admin  # before the brokers stop: no reconnect noise
