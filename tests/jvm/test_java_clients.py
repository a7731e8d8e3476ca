"""Kafka's Java clients (kafka-clients 4.x) against strom: the JUnit tests of ``jvm/src/test``.

One JVM per topology runs every JUnit class below against this module's broker (a single
broker, then the 3-broker cluster: ``both_topologies``); each pytest test here reports one JUnit
method (all of its parameterized cases). What each checks is in its Java source:

* ``ProducerTest``: acks 0/1/all, the idempotent producer, every compression codec, headers,
  CreateTime and LogAppendTime timestamps, each read back record by record;
* ``TransactionsTest``: consume-transform-produce with ``sendOffsetsToTransaction`` (aborted
  rounds included) read with read_committed and read_uncommitted; an open transaction holding
  the LSO back; a zombie fenced by a new producer with its transactional.id;
* ``ConsumerTest``: the classic group protocol with the eager (range) and cooperative-sticky
  assignors, static membership, seek and offsetsForTimes;
* ``AdminTest``: topics, partitions, configs (incremental too), consumer groups and offsets,
  DeleteRecords, ListOffsets specs, DescribeCluster, DescribeLogDirs, ElectLeaders and partition
  reassignments;
* ``ShareConsumerTest``: share groups (KIP-932) with ``KafkaShareConsumer`` — three consumers on
  one partition, each record to one; RELEASE redelivers with a higher delivery count, REJECT
  never — and the Admin client's share-group calls (list, describe, offsets with lag, alter,
  delete offsets, delete).

Not here yet (docs/jvm.md): ``group.protocol=consumer`` (KIP-848) waits for its issue; ACLs
and SCRAM for the security issue.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.jvm.jvm import Outcome, check_outcomes, junit_tests, run_junit
from tests.topology import CLUSTER3, module_broker

pytestmark = [pytest.mark.both_topologies, pytest.mark.jvm, pytest.mark.timeout(600)]
CLASSES = ("ProducerTest", "TransactionsTest", "ConsumerTest", "AdminTest", "ShareConsumerTest")
CASES = [(c, m) for c in CLASSES for m in junit_tests(c)]


@pytest.fixture(scope="module")
def broker(topology: str, request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:  # fmt: skip
    """This module's broker: a single one of its own, or the JVM tests' shared cluster."""
    if topology == CLUSTER3 and not os.environ.get("STROM_TEST_BOOTSTRAP"):
        yield request.getfixturevalue("jvm_cluster")
        return
    with module_broker(topology, tmp_path_factory.mktemp("broker")) as b:
        yield b


@pytest.fixture(scope="module")
def junit(broker: Any, tmp_path_factory: pytest.TempPathFactory) -> list[Outcome]:
    brokers = len(getattr(broker, "brokers", None) or {}) or 1
    return run_junit(CLASSES, {"strom.bootstrap": broker.bootstrap, "strom.brokers": str(brokers)},
                     tmp_path_factory.mktemp("junit"), timeout=540)  # fmt: skip


@pytest.mark.parametrize(("test_class", "method"), CASES, ids=[f"{c}.{m}" for c, m in CASES])
def test_java(junit: list[Outcome], test_class: str, method: str) -> None:
    check_outcomes(junit, test_class, method)
