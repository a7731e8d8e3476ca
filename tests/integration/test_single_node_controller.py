"""The controller's admin APIs on a single node (strom.controller.single_node): ElectLeaders
(43), AlterPartitionReassignments (45), ListPartitionReassignments (46) answer as Kafka's
controller does with one broker, through confluent-kafka, kafka-python, the raw wire and the
CLI; nothing they do changes a partition's leader epoch or its data, before or after a restart.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ElectionType, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient
from kafka import TopicPartition as KTP
from kafka.errors import (
    InvalidReplicationAssignmentError,
    NoReassignmentInProgressError,
    UnknownTopicOrPartitionError,
)

from strom.admin import wire
from strom.protocol.errors import ErrorCode
from strom.testing import BrokerProcess
from tests.integration.cli_helpers import Cli

PARTITIONS = 2


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A single node, whatever STROM_TEST_CLUSTER says (these tests are about one broker)."""
    with BrokerProcess(tmp_path_factory.mktemp("single") / "data") as proc:
        yield proc


def _topic_with_data(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for p in range(PARTITIONS):
        producer.produce(topic, f"v{p}".encode(), partition=p)
    assert producer.flush(30) == 0


def _read(bootstrap: str, topic: str) -> dict[int, list[bytes]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-reader",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})  # fmt: skip
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got: dict[int, list[bytes]] = {}
    try:
        for _ in range(60):
            for msg in consumer.consume(10, timeout=0.5):
                assert msg.error() is None, msg.error()
                got.setdefault(msg.partition(), []).append(msg.value())
            if sum(len(v) for v in got.values()) >= PARTITIONS:
                break
    finally:
        consumer.close()
    return got


def _leaders(bootstrap: str, topic: str) -> list[tuple[int, int, int, list[int], list[int]]]:
    """(partition, leader, leader epoch, replicas, isr) from Metadata v9."""
    resp = wire.request(bootstrap, 3, 9, topics=(wire.part(3, 9, "MetadataRequestTopic",
                                                           name=topic),),
                        allow_auto_topic_creation=False, include_topic_authorized_operations=False,
                        include_cluster_authorized_operations=False)  # fmt: skip
    [t] = resp.topics
    assert t.error_code == 0
    return sorted((int(p.partition_index), int(p.leader_id), int(p.leader_epoch),
                   list(p.replica_nodes), list(p.isr_nodes)) for p in t.partitions)  # fmt: skip


#: every partition led by broker 1 in LocalLeadership's leader epoch 0, replicas and ISR [1]
SETTLED = [(p, 1, 0, [1], [1]) for p in range(PARTITIONS)]


def test_elect_leaders_is_not_needed_on_one_broker(single: BrokerProcess, topic_name: str) -> None:
    boot = single.bootstrap
    _topic_with_data(boot, topic_name)
    admin = AdminClient({"bootstrap.servers": boot})
    wanted = [TopicPartition(topic_name, p) for p in range(PARTITIONS)]
    wanted += [TopicPartition(topic_name, 5), TopicPartition("no-such-topic", 0)]
    for kind, why in ((ElectionType.PREFERRED, "Leader is already the preferred replica."),
                      (ElectionType.UNCLEAN, "The partition has a live leader.")):  # fmt: skip
        result = admin.elect_leaders(kind, wanted).result(timeout=30)
        got = {(tp.topic, tp.partition): (e.code(), e.str()) for tp, e in result.items()}
        assert got == {
            **{(topic_name, p): (KafkaError.ELECTION_NOT_NEEDED, why) for p in range(PARTITIONS)},
            (topic_name, 5): (KafkaError.UNKNOWN_TOPIC_OR_PART,
                              f"The partition {topic_name}-5 does not exist."),
            ("no-such-topic", 0): (KafkaError.UNKNOWN_TOPIC_OR_PART,
                                   "The partition no-such-topic-0 does not exist."),
        }  # fmt: skip
    # every partition: those not led by their preferred replica, here none
    assert admin.elect_leaders(ElectionType.PREFERRED, None).result(timeout=30) == {}
    # v0 (always preferred, errors per partition)
    resp = wire.request(boot, 43, 0, timeout=10_000, topic_partitions=(
        wire.part(43, 0, "TopicPartitions", topic=topic_name, partitions=(0, 7)),))  # fmt: skip
    [res] = resp.replica_election_results
    assert [(int(p.partition_id), int(p.error_code)) for p in res.partition_result] == [
        (0, ErrorCode.election_not_needed), (7, ErrorCode.unknown_topic_or_partition)]
    assert _leaders(boot, topic_name) == SETTLED
    assert _read(boot, topic_name) == {p: [f"v{p}".encode()] for p in range(PARTITIONS)}


def test_reassignment_to_this_broker_completes_at_once(single: BrokerProcess,
                                                        topic_name: str) -> None:  # fmt: skip
    boot = single.bootstrap
    _topic_with_data(boot, topic_name)
    admin = KafkaAdminClient(bootstrap_servers=boot)
    try:
        got = admin.alter_partition_reassignments({
            KTP(topic_name, 0): [1], KTP(topic_name, 1): [7], KTP(topic_name, 9): [1],
            KTP("no-such-topic", 0): [1]})  # fmt: skip
        assert got == {
            KTP(topic_name, 0): None,  # accepted, and done: nothing is in flight
            KTP(topic_name, 1): InvalidReplicationAssignmentError,  # broker 7 is not live
            KTP(topic_name, 9): UnknownTopicOrPartitionError,
            KTP("no-such-topic", 0): UnknownTopicOrPartitionError,
        }
        assert admin.list_partition_reassignments() == {}
        assert admin.list_partition_reassignments([KTP(topic_name, 0)]) == {}
        assert admin.alter_partition_reassignments({KTP(topic_name, 0): None}) == {
            KTP(topic_name, 0): NoReassignmentInProgressError}
        assert admin.alter_partition_reassignments({KTP(topic_name, 1): [1, 1]}) == {
            KTP(topic_name, 1): InvalidReplicationAssignmentError}
    finally:
        admin.close()
    # v1 refusing a change of the replication factor (KIP-860) before looking at the brokers
    resp = wire.request(boot, 45, 1, timeout=10_000, allow_replication_factor_change=False,
                        topics=(wire.part(45, 1, "ReassignableTopic", name=topic_name, partitions=(
                            wire.part(45, 1, "ReassignablePartition", partition_index=0,
                                      replicas=(1, 2)),)),))  # fmt: skip
    assert resp.error_code == 0
    [[p]] = [t.partitions for t in resp.responses]
    assert int(p.error_code) == ErrorCode.invalid_replication_factor
    assert _leaders(boot, topic_name) == SETTLED
    assert _read(boot, topic_name) == {p: [f"v{p}".encode()] for p in range(PARTITIONS)}


def test_cli_reassign_to_an_unknown_broker_and_a_restart(tmp_path: Path, topic_name: str) -> None:
    with BrokerProcess(tmp_path / "data") as broker:
        boot = broker.bootstrap
        _topic_with_data(boot, topic_name)
        cli = Cli(boot)
        plan = tmp_path / "plan.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": topic_name, "partition": 0, "replicas": [7]}]}))  # fmt: skip
        line = cli.fail("topic", "reassign", "execute", "--reassignment-json-file", str(plan))
        assert "INVALID_REPLICA_ASSIGNMENT" in line and f"{topic_name}-0" in line, line
        assert broker.stop() == 0
        broker.start()
        # after a restart: the same answers, leader epochs where they were, the data intact
        out = cli.lines("cluster", "elect-leaders", "--preferred", "--topic", topic_name)
        assert out == [f"Valid replica already elected for partitions {topic_name}-0, "
                       f"{topic_name}-1"]  # fmt: skip
        plan.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": topic_name, "partition": p, "replicas": [1]} for p in range(PARTITIONS)]}))
        cli.ok("topic", "reassign", "execute", "--reassignment-json-file", str(plan))
        assert cli.lines("topic", "reassign", "verify", "--reassignment-json-file", str(plan))[
            1:] == [f"Reassignment of partition {topic_name}-{p} is completed."
                    for p in range(PARTITIONS)]  # fmt: skip
        assert _leaders(boot, topic_name) == SETTLED
        assert _read(boot, topic_name) == {p: [f"v{p}".encode()] for p in range(PARTITIONS)}
