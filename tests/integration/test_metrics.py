"""/metrics of a real broker, parsed with prometheus-client's parser, against what real clients
did: counters rise by exactly what was produced and fetched, lag matches committed offsets."""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from strom.protocol.messages import build
from strom.testing import BrokerProcess, free_port, wait_for_port
from strom.testing.raw import RawConnection
from tests.integration.admin_http import Scrape, get, scrape
from tests.integration.clients import consume_all, create_topic, produce

BTM = "kafka_server_brokertopicmetrics_"


@pytest.fixture(scope="module")
def admin_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("metrics") / "data", admin=True)
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def test_produce_counters_rise_by_exactly_the_messages_and_value_bytes(admin_broker, topic_name):
    n, size = 500, 100
    create_topic(admin_broker.bootstrap, topic_name, partitions=1)
    before = scrape(admin_broker.admin_url)
    assert before.value(BTM + "messagesin_total", topic=topic_name) is None  # nothing yet
    values = [bytes([65 + i % 26]) * size for i in range(n)]
    produce(admin_broker.bootstrap, topic_name, [{"value": v, "partition": 0} for v in values])
    after = scrape(admin_broker.admin_url)

    assert after.value(BTM + "messagesin_total", topic=topic_name) == n
    assert after.value(BTM + "valuebytesin_total", topic=topic_name) == n * size
    # Kafka's BytesIn counts the batches as stored: exactly the partition's log size
    batch_bytes = after.value(BTM + "bytesin_total", topic=topic_name)
    assert batch_bytes == after.value("kafka_log_log_size", topic=topic_name, partition="0")
    assert batch_bytes is not None and batch_bytes > n * size
    assert after.value("kafka_log_log_logendoffset", topic=topic_name, partition="0") == n
    assert after.value("kafka_log_log_numlogsegments", topic=topic_name, partition="0") == 1
    # the broker-wide series (no topic label) rose by the same amounts
    for name, delta in (("messagesin_total", n), ("valuebytesin_total", n * size),
                        ("bytesin_total", batch_bytes)):  # fmt: skip
        assert after.get(BTM + name) - before.get(BTM + name) == delta, name
    produce_requests = after.get(BTM + "totalproducerequests_total", topic=topic_name)
    assert 1 <= produce_requests <= n
    assert after.get(BTM + "failedproducerequests_total", topic=topic_name) == 0
    # request metrics: every Produce counted once, in the histogram and the time split
    requests = after.get("kafka_network_requestmetrics_requests_total", request="Produce")
    assert requests - before.get("kafka_network_requestmetrics_requests_total",
                                 request="Produce") >= produce_requests  # fmt: skip
    assert after.get("kafka_network_requestmetrics_totaltimems_count", request="Produce") == requests
    assert after.get("kafka_network_requestmetrics_totaltimems_bucket", request="Produce",
                     le="+Inf") == requests  # fmt: skip
    for part in ("requestqueuetimems", "localtimems", "remotetimems"):
        assert after.get(f"kafka_network_requestmetrics_{part}_count", request="Produce") == requests
    assert after.types["kafka_network_requestmetrics_totaltimems"] == "histogram"
    assert after.types[BTM + "bytesin"] == "counter"


def test_fetch_counters_count_the_batches_sent(admin_broker, topic_name):
    n = 300
    create_topic(admin_broker.bootstrap, topic_name, partitions=2)
    produce(admin_broker.bootstrap, topic_name,
            [{"value": b"v%d" % i, "partition": i % 2} for i in range(n)])  # fmt: skip
    before = scrape(admin_broker.admin_url)
    got = consume_all(admin_broker.bootstrap, topic_name, range(2), expected=n)
    assert sorted(m.value() for m in got) == sorted(b"v%d" % i for i in range(n))
    after = scrape(admin_broker.admin_url)
    stored = sum(after.get("kafka_log_log_size", topic=topic_name, partition=str(p))
                 for p in range(2))  # fmt: skip
    # each batch went out once: the bytes out are the bytes stored
    assert after.get(BTM + "bytesout_total", topic=topic_name) == stored
    assert after.get(BTM + "bytesout_total") - before.get(BTM + "bytesout_total") == stored
    assert after.get(BTM + "totalfetchrequests_total", topic=topic_name) >= 2
    fetches = after.get("kafka_network_requestmetrics_requests_total", request="Fetch")
    assert fetches > before.get("kafka_network_requestmetrics_requests_total", request="Fetch")
    assert after.get("kafka_network_requestmetrics_requests_total",
                     request="FetchConsumer") == fetches  # fmt: skip


def _fetch(bootstrap: str, topic: str, partition: int, offset: int) -> int:
    """One Fetch v12 on a raw connection; the partition's error code."""
    mod = __import__("kio.schema.fetch.v12.request", fromlist=["x"])
    part = build(mod.FetchPartition, partition=partition, current_leader_epoch=-1,
                 fetch_offset=offset, last_fetched_epoch=-1, log_start_offset=-1,
                 partition_max_bytes=1 << 20)  # fmt: skip
    with RawConnection(bootstrap, timeout=10) as conn:
        response = conn.request(
            1, 12, replica_id=-1, max_wait=datetime.timedelta(milliseconds=0), min_bytes=0,
            max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1, rack_id="",
            forgotten_topics_data=(), cluster_id=None,
            topics=(build(mod.FetchTopic, topic=topic, partitions=(part,)),),
        )  # fmt: skip
    return int(response.responses[0].partitions[0].error_code)


def test_errors_are_counted_by_api_and_code(admin_broker, topic_name):
    create_topic(admin_broker.bootstrap, topic_name, partitions=1)
    produce(admin_broker.bootstrap, topic_name, [{"value": b"x", "partition": 0}])
    errors = "kafka_network_requestmetrics_errors_total"
    before = scrape(admin_broker.admin_url)
    assert _fetch(admin_broker.bootstrap, topic_name, 0, 99) == 1  # OFFSET_OUT_OF_RANGE
    assert _fetch(admin_broker.bootstrap, topic_name, 0, 99) == 1
    assert _fetch(admin_broker.bootstrap, topic_name, 5, 0) == 3  # UNKNOWN_TOPIC_OR_PARTITION
    after = scrape(admin_broker.admin_url)

    def delta(**labels: str) -> float:
        return after.get(errors, **labels) - before.get(errors, **labels)

    assert delta(request="Fetch", error="OFFSET_OUT_OF_RANGE") == 2
    assert delta(request="Fetch", error="UNKNOWN_TOPIC_OR_PARTITION") == 1
    assert after.get(BTM + "failedfetchrequests_total", topic=topic_name) == 3
    assert after.value(errors, request="Fetch", error="NONE") is None


def test_lag_matches_the_groups_committed_offsets(admin_broker, topic_name):
    create_topic(admin_broker.bootstrap, topic_name, partitions=3)
    counts = {0: 10, 1: 25, 2: 7}
    produce(admin_broker.bootstrap, topic_name,
            [{"value": b"m", "partition": p} for p, c in counts.items() for _ in range(c)])
    committed = {0: 4, 1: 25, 2: 0}
    group = f"{topic_name}-group"
    consumer = Consumer({"bootstrap.servers": admin_broker.bootstrap, "group.id": group,
                         "enable.auto.commit": False})  # fmt: skip
    try:
        result = consumer.commit(offsets=[TopicPartition(topic_name, p, o)
                                          for p, o in committed.items()],
                                 asynchronous=False)  # fmt: skip
        assert result is not None and all(tp.error is None for tp in result)
    finally:
        consumer.close()
    s = scrape(admin_broker.admin_url)
    for p, offset in committed.items():
        labels = {"consumergroup": group, "topic": topic_name, "partition": str(p)}
        assert s.value("kafka_consumergroup_current_offset", **labels) == offset
        assert s.value("kafka_consumergroup_lag", **labels) == counts[p] - offset
        assert s.value("kafka_topic_partition_current_offset", topic=topic_name,
                       partition=str(p)) == counts[p]  # fmt: skip
    assert s.value("kafka_consumergroup_lag_sum", consumergroup=group, topic=topic_name) == 6 + 0 + 7
    assert s.value("kafka_consumergroup_members", consumergroup=group) == 0
    assert s.get("kafka_coordinator_group_groupmetadatamanager_numgroupsempty") >= 1
    assert s.get("kafka_coordinator_group_groupmetadatamanager_numgroups") >= 1


def test_single_node_cluster_gauges(admin_broker):
    s = scrape(admin_broker.admin_url)
    assert s.value("kafka_controller_kafkacontroller_activecontrollercount") == 1
    for name in ("kafka_controller_kafkacontroller_offlinepartitionscount",
                 "kafka_server_replicamanager_underreplicatedpartitions",
                 "kafka_server_replicamanager_underminisrpartitioncount",
                 "kafka_server_replicamanager_isrshrinks_total",
                 "kafka_server_replicamanager_isrexpands_total"):  # fmt: skip
        assert s.value(name) == 0, name
    partitions = s.value("kafka_server_replicamanager_partitioncount")
    assert partitions == s.value("kafka_server_replicamanager_leadercount")
    assert partitions == len(s.series("kafka_log_log_size"))  # internal topics included
    assert s.get("kafka_server_socket_server_metrics_connection_creation_total",
                 listener="PLAINTEXT") >= 1  # fmt: skip
    states = {dict(k)["state"] for k in
              s.series("kafka_server_transaction_coordinator_metrics_transactions")}  # fmt: skip
    assert {"Empty", "Ongoing", "PrepareCommit", "CompleteCommit", "CompleteAbort"} <= states
    assert s.value("process_cpu_seconds_total") is not None


def test_admin_listener_follows_the_property_and_is_off_when_empty(tmp_path: Path) -> None:
    port = free_port()
    data = tmp_path / "data"
    with BrokerProcess(data, settings={"strom.admin.listener": f"127.0.0.1:{port}"}):
        status, body = get(f"http://127.0.0.1:{port}/health/live")
        assert status == 200 and b"live" in body
        assert Scrape(get(f"http://127.0.0.1:{port}/metrics")[1].decode()).types
    proc = BrokerProcess(data, settings={"strom.admin.listener": ""})
    with proc:
        assert not wait_for_port("127.0.0.1", port, 1.0)
        assert "admin listener off" in proc.log_file.read_text()


def test_live_group_transaction_connections_and_flushes(admin_broker, topic_name):
    """The gauges and counters no other test moves: a group that rebalances and becomes Stable
    with one member, a committed transaction, the open-connection gauge, fsync latency."""
    from confluent_kafka import Producer

    prefix = "kafka_coordinator_group_groupmetadatamanager_"
    create_topic(admin_broker.bootstrap, topic_name, partitions=2, config={"flush.messages": "1"})
    before = scrape(admin_broker.admin_url)
    group, txn_id = f"{topic_name}-live", f"{topic_name}-txn"
    producer = Producer({"bootstrap.servers": admin_broker.bootstrap,
                         "transactional.id": txn_id})  # fmt: skip
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic_name, b"t%d" % i, partition=i % 2)
    producer.commit_transaction(30)
    consumer = Consumer({"bootstrap.servers": admin_broker.bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                         "enable.auto.commit": False})  # fmt: skip
    try:
        consumer.subscribe([topic_name])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 10 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        assert sorted(got) == sorted(b"t%d" % i for i in range(10))
        consumer.commit(asynchronous=False)
        during = scrape(admin_broker.admin_url)
    finally:
        consumer.close()
        producer.flush(5)
    after = scrape(admin_broker.admin_url)

    def rose(s: Scrape, name: str, **labels: str) -> float:
        return s.get(name, **labels) - before.get(name, **labels)

    assert rose(during, prefix + "numgroupsstable") == 1  # ours, while its member is alive
    assert during.value("kafka_consumergroup_members", consumergroup=group) == 1
    assert rose(during, "kafka_server_group_coordinator_metrics_group_rebalance_total") >= 1
    assert rose(during, "kafka_server_group_coordinator_metrics_group_completed_rebalance_total") >= 1
    for p in range(2):  # 5 records and the commit marker each; the group committed past the
        labels = {"consumergroup": group, "topic": topic_name, "partition": str(p)}  # records
        hw = during.value("kafka_topic_partition_current_offset", topic=topic_name, partition=str(p))
        committed = during.value("kafka_consumergroup_current_offset", **labels)
        assert hw == 6 and committed in (5, 6)  # (the marker too, once the client has seen it)
        assert during.value("kafka_consumergroup_lag", **labels) == hw - committed
    # the consumer left: the group is Empty again, not Stable
    assert after.get(prefix + "numgroupsstable") == before.get(prefix + "numgroupsstable")
    assert after.value("kafka_consumergroup_members", consumergroup=group) == 0
    txns = "kafka_server_transaction_coordinator_metrics_transactions"
    assert rose(during, txns, state="CompleteCommit") == 1
    # the producer and the consumer each held connections; both closed now
    assert during.get("kafka_server_socket_server_metrics_connection_count",
                      listener="PLAINTEXT") >= 2  # fmt: skip
    assert rose(after, "kafka_server_socket_server_metrics_connection_close_total",
                listener="PLAINTEXT") >= 2  # fmt: skip
    # flush.messages=1: every append (10 records and 2 transaction markers at least) fsyncs
    flushes = "kafka_log_logflushstats_logflushrateandtimems_count"
    assert rose(after, flushes) >= 2
    assert after.get("kafka_log_logflushstats_logflushrateandtimems_bucket", le="+Inf") == \
        after.get(flushes)  # fmt: skip
