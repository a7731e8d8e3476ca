"""ApiVersions: what is advertised is exactly what is served, and matches the newest Kafka.

The reference is kafka-python's table of ApiVersions responses recorded from real Apache
Kafka brokers (``BROKER_API_VERSIONS``), newest release first.
"""

from __future__ import annotations

import random

import pytest
from kafka.protocol.broker_version_data import BROKER_API_VERSIONS
from kio.schema.errors import ErrorCode

from strom.broker import dispatch
from strom.protocol.messages import RequestHeader, decode_response, encode_request, request_class
from strom.testing.raw import RawConnection
from strom.testing.samples import minimal, sample
from tests.integration.clients import create_topic, produce
from tests.integration.routing import any_broker, coordinator_of, leader_of, process_at

NEWEST_KAFKA = (4, 3)  # the newest release in kafka-python 3.0.12's table (pinned in pyproject)
# Versions Kafka advertises that strom does not serve yet: api key -> (strom max, why).
KNOWN_GAPS: dict[int, tuple[int, str]] = {
    # Transaction version 2 (KIP-890 part 2: the epoch bumped at every EndTxn, implicit
    # AddPartitions) is not served; advertising its versions would make clients use it.
    24: (3, "AddPartitionsToTxn v4 (verify-only batches: served to brokers, not advertised) and v5 (TV2)"),
    25: (3, "AddOffsetsToTxn v4 (TV2)"),
    26: (3, "EndTxn v4 (TRANSACTION_ABORTABLE) and v5 (TV2)"),
    27: (1, "WriteTxnMarkers v2 (TransactionVersion field)"),
    28: (3, "TxnOffsetCommit v4 (TRANSACTION_ABORTABLE) and v5 (TV2)"),
    66: (1, "ListTransactions v2 (transactional id pattern, KIP-1152)"),
}
# ZooKeeper-mode inter-broker APIs (issue 9): Kafka 4 (KRaft) no longer has most of them, so
# they are checked against strom's own ranges below (the last ZooKeeper-mode release, 3.9, has
# them all): the controller's requests to brokers at Kafka 3.x's last version only.
ZK_MODE_KAFKA = (3, 9)
ZK_MODE_APIS: dict[int, tuple[int, int]] = {
    4: (7, 7),  # LeaderAndIsr (3.9: 0-7)
    5: (4, 4),  # StopReplica (3.9: 0-4)
    6: (8, 8),  # UpdateMetadata (3.9: 0-8)
    7: (3, 3),  # ControlledShutdown: v3 only, the version strom vendored (Kafka 3.x sends it)
    56: (2, 3),  # AlterPartition by topic id only: kio has no v0-1 (by name) schema
}


def advertised(bootstrap: str, version: int = 3) -> dict[int, tuple[int, int]]:
    with RawConnection(any_broker(bootstrap)) as conn:
        resp = conn.request(18, version, client_software_name="t", client_software_version="1")
    assert resp.error_code == ErrorCode.none
    return {int(a.api_key): (int(a.min_version), int(a.max_version)) for a in resp.api_keys}


def test_advertised_list_is_the_handler_registry(broker) -> None:
    registry = {
        key: (spec.advertise_min, spec.advertised_max)
        for key, spec in dispatch.load_handlers().items()
    }
    assert len(registry) >= 25
    for version in (0, 3, 4):
        assert advertised(broker.bootstrap, version) == registry


def test_advertised_ranges_are_the_newest_kafka_release(broker) -> None:
    kafka = BROKER_API_VERSIONS[NEWEST_KAFKA]
    ours = advertised(broker.bootstrap)
    mismatches = {}
    for key, (lo, hi) in ours.items():
        if key in ZK_MODE_APIS:
            expected = ZK_MODE_APIS[key]
            assert key in BROKER_API_VERSIONS[ZK_MODE_KAFKA], key
            if (lo, hi) != expected:
                mismatches[key] = ((lo, hi), expected)
            continue
        expected = kafka[key]
        if key in KNOWN_GAPS:
            expected = (expected[0], KNOWN_GAPS[key][0])
        if (lo, hi) != expected:
            mismatches[key] = ((lo, hi), expected)
    assert mismatches == {}, f"strom vs Kafka {NEWEST_KAFKA}: {mismatches}"


def test_every_advertised_version_is_answered(broker) -> None:
    """A random well-formed request of every advertised version gets a response (maybe an
    error code), never a closed connection; Produce v0-2 are advertised but refused."""
    rng = random.Random(13)
    correlation = 0
    with RawConnection(any_broker(broker.bootstrap)) as conn:
        for key, (lo, hi) in sorted(advertised(broker.bootstrap).items()):
            for version in range(max(lo, 3) if key == 0 else lo, hi + 1):
                if key in (19, 20, 21, 33, 37, 42, 44, 47, 49, 51):
                    continue  # mutating admin APIs: covered by their own tests
                if key in ZK_MODE_APIS and "," in broker.bootstrap:
                    # a cluster member acts on the controller's requests (LeaderAndIsr...,
                    # no authorizer, as Kafka without one): random ones would wreck the
                    # module's cluster; a single node refuses them all (local leadership)
                    continue
                correlation += 1
                req = sample(request_class(key, version), rng)
                conn.send_bytes(encode_request(RequestHeader(key, version, correlation, "t"), req))
                if key == 0 and req.acks == 0:
                    continue  # acks=0: no answer by design
                got, _ = decode_response(key, version, conn.recv_frame())
                assert got == correlation, (key, version)
    log = process_at(broker, any_broker(broker.bootstrap)).log_file.read_text(errors="replace")
    assert "Traceback" not in log
    assert " failed (" not in log, "a handler raised: see the broker log"


# Fields of the minimal requests set to something else: an answer is wanted (acks=0 has none),
# and the controller's requests must be ones a cluster member refuses as stale / unknown.
_MINIMAL_OVERRIDES: dict[int, dict[str, object]] = {
    0: {"acks": -1},
    4: {"controller_id": -1, "controller_epoch": -1},
    5: {"controller_id": -1, "controller_epoch": -1},
    6: {"controller_id": -1, "controller_epoch": -1},
    7: {"broker_id": -1},
    56: {"broker_id": -1},
}


def test_every_api_key_answers_a_minimal_request_at_its_newest_version(broker) -> None:
    """Every API key in the ApiVersions answer, at the highest version advertised, with the
    smallest well-formed request (:func:`strom.testing.samples.minimal`), on one connection:
    each gets its response (matching correlation id, decodable as that version), so the
    connection was never dropped; and the broker still answers on it at the end."""
    ours = advertised(broker.bootstrap, 4)
    assert {74, 75} <= set(ours)  # ListConfigResources, DescribeTopicPartitions
    answered = {}
    with RawConnection(any_broker(broker.bootstrap)) as conn:
        for correlation, (key, (_lo, hi)) in enumerate(sorted(ours.items()), start=1):
            req = minimal(request_class(key, hi), **_MINIMAL_OVERRIDES.get(key, {}))
            conn.send_bytes(encode_request(RequestHeader(key, hi, correlation, "walk"), req))
            got, response = decode_response(key, hi, conn.recv_frame())
            assert got == correlation, (key, hi)
            answered[key] = response
        assert advertised(broker.bootstrap, 4) == ours  # still serving
        final = conn.request(18, 3, client_software_name="t", client_software_version="1")
        assert final.error_code == ErrorCode.none
    assert set(answered) == set(ours)
    for key in (4, 5, 6):  # the controller's requests from no controller: refused
        assert answered[key].error_code != ErrorCode.none, (key, answered[key])
    log = process_at(broker, any_broker(broker.bootstrap)).log_file.read_text(errors="replace")
    assert "Traceback" not in log
    assert " failed (" not in log, "a handler raised: see the broker log"


def test_docs_list_every_kafka_api_left_out(broker) -> None:
    """docs/kafka-apis.md names exactly the API keys Kafka 4.3 serves that strom leaves out."""
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "kafka-apis.md").read_text()
    listed = {int(k) for k in re.findall(r"^\| (\d+) \|", doc, re.M)}
    left_out = set(BROKER_API_VERSIONS[NEWEST_KAFKA]) - set(advertised(broker.bootstrap))
    assert listed == left_out


def test_kafka_python_infers_the_newest_release_strom_can_serve(broker, topic_name) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    create_topic(broker.bootstrap, topic_name)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    try:
        for i in range(5):
            producer.send(topic_name, f"kp-{i}".encode(), partition=0).get(timeout=20)
    finally:
        producer.close()
    consumer = KafkaConsumer(
        topic_name, bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
        consumer_timeout_ms=10_000, group_id=None,
    )  # fmt: skip
    try:
        assert consumer.config["api_version"] == NEWEST_KAFKA  # 4.3 needed DescribeLogDirs v5
        got = [m.value for m in consumer]
    finally:
        consumer.close()
    assert got == [f"kp-{i}".encode() for i in range(5)]


def test_confluent_kafka_still_round_trips(broker, topic_name) -> None:
    from tests.integration.clients import consume_all

    create_topic(broker.bootstrap, topic_name)
    produce(broker.bootstrap, topic_name, [{"value": f"ck-{i}".encode()} for i in range(5)])
    got = consume_all(broker.bootstrap, topic_name, [0], expected=5)
    assert [m.value() for m in got] == [f"ck-{i}".encode() for i in range(5)]


@pytest.mark.parametrize("version", [13])
def test_produce_by_topic_id(broker, topic_name, version) -> None:
    import datetime

    from strom.protocol.messages import build
    from strom.protocol.record_batch import build_batch

    create_topic(broker.bootstrap, topic_name)
    mod = __import__(f"kio.schema.produce.v{version}.request", fromlist=["x"])
    with RawConnection(leader_of(broker.bootstrap, topic_name)) as conn:
        meta = conn.request(3, 12, topics=None, allow_auto_topic_creation=False,
                            include_topic_authorized_operations=False)
        topic_id = next(t.topic_id for t in meta.topics if t.name == topic_name)

        def send(tid):
            return conn.request(0, version, transactional_id=None, acks=-1,
                                timeout=datetime.timedelta(seconds=5),
                                topic_data=(build(mod.TopicProduceData, topic_id=tid, partition_data=(
                                    build(mod.PartitionProduceData, index=0,
                                          records=build_batch([(None, b"by-id", [], 1)])),)),))

        ok = send(topic_id).responses[0]
        assert (ok.topic_id, ok.partition_responses[0].error_code) == (topic_id, ErrorCode.none)
        unknown = send(__import__("uuid").uuid4()).responses[0].partition_responses[0]
        assert unknown.error_code == ErrorCode.unknown_topic_id
    from tests.integration.clients import consume_all

    assert [m.value() for m in consume_all(broker.bootstrap, topic_name, [0], expected=1)] == [b"by-id"]


def test_metadata_v0_empty_topic_list_means_all_topics(broker, topic_name) -> None:
    create_topic(broker.bootstrap, topic_name)
    with RawConnection(any_broker(broker.bootstrap)) as conn:
        v0 = conn.request(3, 0, topics=())
        v1 = conn.request(3, 1, topics=())
    assert topic_name in {t.name for t in v0.topics}
    assert [t.name for t in v1.topics] == []  # from v1 on, empty means none (null means all)


def test_offset_commit_and_fetch_v10_by_topic_id(broker, topic_name) -> None:
    import uuid

    from strom.protocol.messages import build

    create_topic(broker.bootstrap, topic_name, partitions=2)
    commit = __import__("kio.schema.offset_commit.v10.request", fromlist=["x"])
    fetch = __import__("kio.schema.offset_fetch.v10.request", fromlist=["x"])
    group, stranger = f"g-{topic_name}", uuid.uuid4()
    with RawConnection(coordinator_of(broker.bootstrap, group)) as conn:
        meta = conn.request(3, 12, topics=None, allow_auto_topic_creation=False,
                            include_topic_authorized_operations=False)
        topic_id = next(t.topic_id for t in meta.topics if t.name == topic_name)
        resp = conn.request(8, 10, group_id=group, generation_id_or_member_epoch=-1, member_id="",
                            group_instance_id=None, topics=tuple(
            build(commit.OffsetCommitRequestTopic, topic_id=tid, partitions=(
                build(commit.OffsetCommitRequestPartition, partition_index=1, committed_offset=7,
                      committed_leader_epoch=-1, committed_metadata="m"),))
            for tid in (topic_id, stranger)))  # fmt: skip
        assert [(t.topic_id, [p.error_code for p in t.partitions]) for t in resp.topics] == [
            (topic_id, [ErrorCode.none]), (stranger, [ErrorCode.unknown_topic_id])]

        def fetch_offsets(topics):
            resp = conn.request(9, 10, require_stable=False, groups=(build(
                fetch.OffsetFetchRequestGroup, group_id=group, member_id=None, member_epoch=-1,
                topics=topics),))  # fmt: skip
            (g,) = resp.groups
            assert g.error_code == ErrorCode.none
            return {(t.topic_id, p.partition_index): (p.committed_offset, p.metadata, p.error_code)
                    for t in g.topics for p in t.partitions}  # fmt: skip

        wanted = tuple(build(fetch.OffsetFetchRequestTopics, topic_id=tid, partition_indexes=(0, 1))
                       for tid in (topic_id, stranger))  # fmt: skip
        assert fetch_offsets(wanted) == {
            (topic_id, 0): (-1, "", ErrorCode.none),
            (topic_id, 1): (7, "m", ErrorCode.none),
            (stranger, 0): (-1, "", ErrorCode.unknown_topic_id),
            (stranger, 1): (-1, "", ErrorCode.unknown_topic_id),
        }
        assert fetch_offsets(None) == {(topic_id, 1): (7, "m", ErrorCode.none)}
