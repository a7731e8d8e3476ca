"""Client quotas against a real broker: DescribeClientQuotas / AlterClientQuotas on the wire
and through ``strom quota``, and throttling as clients see it (confluent-kafka's
``throttle_cb``, the ``throttle_time_ms`` of raw responses, the muted connection).

The module's broker has ``quota.window.num=3`` one-second windows (Kafka's default is 11): the
byte rates' token bucket holds 3 s of quota (the burst a client gets up front) instead of 11,
and the request-time rate is steady within a few seconds. The byte rates are checked over 15 s
of steady state with requests (and fetch responses) of 16 KiB, small next to the quota (each
is recorded whole when it is handled). Each test uses client ids of its own; quotas on the
default user (which every ANONYMOUS client matches) are only set on a broker of the test's
own, and on the default client id only for a moment, on ``controller_mutation_rate`` (no
other test of the module creates topics meanwhile).
"""

from __future__ import annotations

import datetime
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from prometheus_client.parser import text_string_to_metric_families

from strom.admin.wire import part
from strom.testing import BrokerProcess
from strom.testing.raw import RawConnection
from tests.integration.cli_helpers import Cli
from tests.integration.clients import create_topic
from tests.topology import module_broker

WINDOWS = {"quota.window.num": "3"}
DESCRIBE, ALTER = 48, 49
INVALID_REQUEST, UNSUPPORTED_VERSION = 42, 35


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with module_broker("single", tmp_path_factory.mktemp("quotas"), WINDOWS) as b:
        yield b


def _id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def _alter(conn: RawConnection, entries: list[tuple[list[tuple[str, str | None]],
           list[tuple[str, float, bool]]]], validate_only: bool = False) -> list[tuple[int, str | None]]:  # fmt: skip
    reqs = tuple(part(ALTER, 1, "EntryData",
                      entity=tuple(part(ALTER, 1, "EntityData", entity_type=t, entity_name=n)
                                   for t, n in entity),
                      ops=tuple(part(ALTER, 1, "OpData", key=k, value=v, remove=r)
                                for k, v, r in ops))
                 for entity, ops in entries)  # fmt: skip
    resp = conn.request(ALTER, 1, entries=reqs, validate_only=validate_only)
    return [(int(e.error_code), e.error_message) for e in resp.entries]


def _describe(conn: RawConnection, components: list[tuple[str, int, str | None]],
              strict: bool) -> tuple[int, dict[tuple[tuple[str, str | None], ...], dict[str, float]]]:  # fmt: skip
    resp = conn.request(DESCRIBE, 1, strict=strict, components=tuple(
        part(DESCRIBE, 1, "ComponentData", entity_type=t, match_type=m, match=n)
        for t, m, n in components))  # fmt: skip
    found = {tuple((e.entity_type, e.entity_name) for e in entry.entity):
             {v.key: float(v.value) for v in entry.values} for entry in resp.entries or ()}  # fmt: skip
    return int(resp.error_code), found


def test_alter_and_describe_on_the_wire(broker: Any) -> None:
    user, client = _id("user"), _id("client")
    with RawConnection(broker.bootstrap) as conn:
        results = _alter(conn, [
            ([("user", user)], [("consumer_byte_rate", 4096.0, False),
                                ("controller_mutation_rate", 2.5, False)]),
            ([("user", user), ("client-id", client)], [("producer_byte_rate", 1e9, False)]),
            ([("client-id", None)], [("controller_mutation_rate", 9.0, False)]),
            ([("client-id", client)], [("producer_byte_rate", 1.5, False)]),
            ([("client-id", client)], [("bogus", 1.0, False)]),  # the same entity again
            ([], [("producer_byte_rate", 1.0, False)]),
            ([("group", "g")], [("producer_byte_rate", 1.0, False)]),
            ([("user", "")], [("producer_byte_rate", 1.0, False)]),
            ([("user", _id("u"))], [("request_percentage", 0.0, False)]),
        ])  # fmt: skip
        assert results[:3] == [(0, None)] * 3
        assert results[3] == (INVALID_REQUEST, "producer_byte_rate cannot be a fractional value.")
        assert results[4] == (INVALID_REQUEST, f"Ignoring duplicate entity client-id '{client}'")
        assert _alter(conn, [([("client-id", client)], [("bogus", 1.0, False)])]) == [
            (INVALID_REQUEST, "Invalid configuration key bogus")]
        assert results[5] == (INVALID_REQUEST, "Invalid empty client quota entity")
        assert results[6] == (INVALID_REQUEST, "Unhandled client quota entity type: group")
        assert results[7] == (INVALID_REQUEST, "Empty user not supported")
        assert results[8][0] == INVALID_REQUEST and "must be greater than 0" in str(results[8][1])
        # validate_only: checked, nothing written
        assert _alter(conn, [([("client-id", client)], [("producer_byte_rate", 5.0, False)])],
                      validate_only=True) == [(0, None)]  # fmt: skip
        code, found = _describe(conn, [("client-id", 0, client)], strict=True)
        assert code == 0 and found == {}
        # exact user, not strict: the user and the user's client
        code, found = _describe(conn, [("user", 0, user)], strict=False)
        assert code == 0 and found == {
            (("user", user),): {"consumer_byte_rate": 4096.0, "controller_mutation_rate": 2.5},
            (("user", user), ("client-id", client)): {"producer_byte_rate": 1e9},
        }
        code, found = _describe(conn, [("user", 0, user)], strict=True)
        assert list(found) == [(("user", user),)]
        code, found = _describe(conn, [("client-id", 1, None)], strict=True)
        assert found == {(("client-id", None),): {"controller_mutation_rate": 9.0}}
        code, found = _describe(conn, [("topic", 2, None)], strict=False)
        assert code == UNSUPPORTED_VERSION and found == {}
        # removing keys: the entity disappears from the answers with its last quota
        assert _alter(conn, [([("user", user)], [("consumer_byte_rate", 0.0, True),
                                                 ("controller_mutation_rate", 0.0, True)]),
                             ([("client-id", None)], [("controller_mutation_rate", 0.0, True)])]
                      ) == [(0, None), (0, None)]  # fmt: skip
        code, found = _describe(conn, [("user", 0, user)], strict=False)
        assert found == {(("user", user), ("client-id", client)): {"producer_byte_rate": 1e9}}


def test_cli_describe_and_alter(broker: Any) -> None:
    cli = Cli(broker.bootstrap)
    client = _id("cli")
    out = cli.ok("quota", "alter", "--client", client, "--add-config",
                 "producer_byte_rate=1048576,request_percentage=200")  # fmt: skip
    assert out.strip() == f"Completed updating config for client-id '{client}'."
    assert cli.lines("quota", "describe", "--client", client) == [
        f"Quota configs for client-id '{client}' are producer_byte_rate=1048576.0, "
        "request_percentage=200.0"]
    cli.ok("quota", "alter", "--user", "a b", "--client-defaults", "--add-config",
           "controller_mutation_rate=3")  # fmt: skip
    assert cli.lines("quota", "describe", "--user", "a b", "--client-defaults") == [
        "Quota configs for user-principal 'a b', the default client-id are "
        "controller_mutation_rate=3.0"]
    line = cli.fail("quota", "alter", "--client", client, "--add-config", "consumer_byte_rate=0.5")
    assert line.endswith("consumer_byte_rate cannot be a fractional value. (INVALID_REQUEST)")
    assert "nothing to change" in cli.fail("quota", "alter", "--client", client)
    assert "name a user" in cli.fail("quota", "alter", "--add-config", "producer_byte_rate=1")
    cli.ok("quota", "alter", "--client", client, "--delete-config",
           "producer_byte_rate,request_percentage")  # fmt: skip
    cli.ok("quota", "alter", "--user", "a b", "--client-defaults", "--delete-config",
           "controller_mutation_rate")  # fmt: skip
    assert cli.lines("quota", "describe", "--client", client) == []


class _Load:
    """A producer (or consumer) run in a thread: what it moved, and when."""

    def __init__(self) -> None:
        self.times: list[tuple[float, int]] = []
        self.throttles: list[float] = []

    def rate(self, start: float, end: float) -> float:
        return sum(n for t, n in self.times if start <= t < end) / (end - start)


def _produce(bootstrap: str, topic: str, client_id: str, until: float, load: _Load) -> None:
    producer = Producer({
        "bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5,
        "batch.size": 16384,  # requests small next to the quota: Kafka's measurement is per request
        "throttle_cb": lambda event: load.throttles.append(event.throttle_time),
    })  # fmt: skip
    value = b"v" * 1000

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            load.times.append((time.monotonic(), len(msg.value())))

    while time.monotonic() < until:
        if len(producer) > 300:  # a bounded queue: what is delivered is the client's pace
            producer.poll(0.005)
            continue
        producer.produce(topic, value, on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(30) == 0


def _set(broker: Any, flags: list[str], config: str) -> None:
    Cli(broker.bootstrap).ok("quota", "alter", *flags, "--add-config", config)


@pytest.mark.serial  # rates and throttle times measured: alone on the machine
def test_producer_throttled_to_its_rate_while_another_keeps_its_speed(broker: Any) -> None:
    topic, slow, fast = _id("quota-produce"), _id("slow"), _id("fast")
    create_topic(broker.bootstrap, topic)
    quota = 200_000
    baseline = _Load()
    start = time.monotonic()
    _produce(broker.bootstrap, topic, fast, start + 5, baseline)
    fast_alone = baseline.rate(start + 1, start + 5)
    _set(broker, ["--client", slow], f"producer_byte_rate={quota}")
    throttled, unthrottled = _Load(), _Load()
    start = time.monotonic()
    thread = threading.Thread(target=_produce,
                              args=(broker.bootstrap, topic, slow, start + 20, throttled))  # fmt: skip
    thread.start()
    _produce(broker.bootstrap, topic, fast, start + 20, unthrottled)
    thread.join()
    # steady state: after the burst allowed up front (3 s of quota, the bucket)
    slow_rate = throttled.rate(start + 4, start + 19)
    fast_rate = unthrottled.rate(start + 4, start + 19)
    assert slow_rate <= quota * 1.1, (slow_rate, quota)
    assert throttled.throttles and max(throttled.throttles) > 0
    assert not unthrottled.throttles
    # the unthrottled producer keeps its speed (alone vs beside the throttled one, same run)
    assert fast_rate >= 0.5 * fast_alone, (fast_rate, fast_alone)
    assert fast_rate >= 20 * quota
    assert slow_rate >= quota * 0.9, (slow_rate, quota)


@pytest.mark.serial  # rates and throttle times measured: alone on the machine
def test_consumer_throttled_to_its_byte_rate(broker: Any) -> None:
    topic, client = _id("quota-fetch"), _id("reader")
    create_topic(broker.bootstrap, topic)
    filled = _Load()
    _produce(broker.bootstrap, topic, _id("filler"), time.monotonic() + 3, filled)
    total = sum(n for _, n in filled.times)
    quota = 300_000
    assert total > quota * 20  # more than the test reads
    _set(broker, ["--client", client], f"consumer_byte_rate={quota}")
    load = _Load()
    consumer = Consumer({
        "bootstrap.servers": broker.bootstrap, "group.id": client, "client.id": client,
        "enable.auto.commit": False,
        # responses small next to the quota, as the producer's requests above
        "fetch.max.bytes": 16384, "message.max.bytes": 16384, "max.partition.fetch.bytes": 16384,
        "throttle_cb": lambda event: load.throttles.append(event.throttle_time),
    })  # fmt: skip
    consumer.assign([TopicPartition(topic, 0, 0)])
    start = time.monotonic()
    offsets = []
    try:
        while time.monotonic() < start + 19:
            msg = consumer.poll(0.2)
            if msg is None or msg.error():
                continue
            offsets.append(msg.offset())
            load.times.append((time.monotonic(), len(msg.value())))
    finally:
        consumer.close()
    assert offsets == list(range(len(offsets)))  # in order, nothing skipped
    rate = load.rate(start + 4, start + 19)
    assert quota * 0.9 <= rate <= quota * 1.1, (rate, quota)
    assert load.throttles and max(load.throttles) > 0


@pytest.mark.serial  # rates and throttle times measured: alone on the machine
def test_request_percentage_throttles_every_api_and_mutes_the_connection(broker: Any) -> None:
    client = _id("busy")
    _set(broker, ["--client", client], "request_percentage=0.5")  # 5 ms of handling a second
    with RawConnection(broker.bootstrap, client_id=client) as conn:
        deadline = time.monotonic() + 20
        throttle_ms = 0
        # until a throttle long enough to time the mute with (a 1 ms throttle is over before
        # the client has read its answer); the busier the client, the longer its throttle
        while throttle_ms < 50:
            assert time.monotonic() < deadline, f"never throttled 50 ms or more ({throttle_ms})"
            resp = conn.request(3, 12, topics=None, allow_auto_topic_creation=False,
                                include_topic_authorized_operations=False)  # fmt: skip
            throttle_ms = int(resp.throttle_time.total_seconds() * 1000)
        assert 0 < throttle_ms <= 1000  # request quotas throttle at most one window
        sent = time.monotonic()
        resp = conn.request(18, 3, client_software_name="t", client_software_version="1")
        waited = time.monotonic() - sent
        assert waited >= throttle_ms / 1000 * 0.8, (waited, throttle_ms)  # the channel was muted
    # another client id on the same broker is not throttled
    with RawConnection(broker.bootstrap, client_id=_id("idle")) as conn:
        for _ in range(50):
            resp = conn.request(3, 12, topics=None, allow_auto_topic_creation=False,
                                include_topic_authorized_operations=False)  # fmt: skip
            assert resp.throttle_time.total_seconds() == 0


THROTTLING_QUOTA_EXCEEDED = 89


def test_controller_mutation_rate_refuses_topic_changes_once_exhausted(broker: Any) -> None:
    """KIP-599 through kafka-python (CreateTopics v7, DeleteTopics v6, CreatePartitions v3:
    the strict versions), and a permissive CreateTopics v5 on the wire."""
    from kafka.admin import KafkaAdminClient, NewPartitions

    client = _id("mutator")
    # 1 partition a second; the bucket holds 3 windows' worth: 3 partitions
    _set(broker, ["--client", client], "controller_mutation_rate=1")
    a, b, c = _id("mut-a"), _id("mut-b"), _id("mut-c")

    def admin_call(call: str, *args: Any) -> list[tuple[str, int]]:
        # a client of its own each time: kafka-python refuses to send on a connection it
        # holds back for a throttle time (KIP-219) rather than wait; the quota is the client
        # id's, shared by every connection
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, client_id=client)
        try:
            result = getattr(admin, call)(*args, raise_errors=False)
        finally:
            admin.close()
        if not isinstance(result, dict):  # create_partitions answers the response itself
            result = result.to_dict()
        rows = result.get("topics") or result.get("topic_error_codes") or result["results"]
        return [(t["name"], t["error_code"]) for t in rows]

    def create(topics: dict[str, int]) -> list[tuple[str, int]]:
        return admin_call("create_topics", {name: {"num_partitions": n, "replication_factor": 1}
                                            for name, n in topics.items()})  # fmt: skip

    assert create({a: 2}) == [(a, 0)]  # 1 partition left
    # b is taken in full while the bucket is not below zero (strict: it goes 8 below); c is
    # refused: the bucket is back at zero in 8 s
    assert create({b: 9, c: 1}) == [(b, 0), (c, THROTTLING_QUOTA_EXCEEDED)]
    # every mutation is refused until then, and changes nothing
    assert admin_call("delete_topics", [a]) == [(a, THROTTLING_QUOTA_EXCEEDED)]
    assert admin_call("create_partitions", {b: NewPartitions(total_count=10)}) == [
        (b, THROTTLING_QUOTA_EXCEEDED)]
    # the refusal's answer carries the time left
    with RawConnection(broker.bootstrap, client_id=client) as conn:
        resp = conn.request(37, 3, topics=(part(37, 3, "CreatePartitionsTopic", name=b, count=10,
                                                assignments=None),),
                            timeout=datetime.timedelta(seconds=15), validate_only=False)  # fmt: skip
        assert [(t.name, int(t.error_code)) for t in resp.results] == [
            (b, THROTTLING_QUOTA_EXCEEDED)]
        assert 0 < resp.throttle_time.total_seconds() <= 8, resp.throttle_time
    listed = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=15).topics
    assert a in listed and c not in listed and len(listed[b].partitions) == 9
    # a higher bound applies at once: the 8 partitions owed are paid back in 8 ms
    _set(broker, ["--client", client], "controller_mutation_rate=1000")
    assert create({c: 1}) == [(c, 0)]
    assert admin_call("create_partitions", {b: NewPartitions(total_count=10)}) == [(b, 0)]
    assert admin_call("delete_topics", [a]) == [(a, 0)]
    # before KIP-599's versions the quota is permissive: the topic is created, the answer
    # throttled for what the bucket owes and the connection muted for that time
    _set(broker, ["--client", client], "controller_mutation_rate=2")  # a bucket of 6 again
    d = _id("mut-d")
    with RawConnection(broker.bootstrap, client_id=client) as conn:
        resp = conn.request(19, 5, topics=(part(19, 5, "CreatableTopic", name=d, num_partitions=11,
                                                replication_factor=1, assignments=(), configs=()),),
                            timeout=datetime.timedelta(seconds=15), validate_only=False)  # fmt: skip
        assert [(t.name, int(t.error_code)) for t in resp.topics] == [(d, 0)]
        throttle_ms = int(resp.throttle_time.total_seconds() * 1000)
        # 5 partitions owed at 2 a second: 2.5 s, less the time the creation took
        assert 0 < throttle_ms <= 2500, throttle_ms
        sent = time.monotonic()
        conn.request(18, 3, client_software_name="t", client_software_version="1")
        assert time.monotonic() - sent >= throttle_ms / 1000 * 0.8  # the channel was muted
    listed = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=15).topics
    assert c in listed and d in listed and a not in listed and len(listed[b].partitions) == 10
    Cli(broker.bootstrap).ok("quota", "alter", "--client", client, "--delete-config",
                             "controller_mutation_rate")  # fmt: skip
    # another client id was never limited
    names = [_id("free") for _ in range(3)]
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, client_id=_id("free"))
    try:
        result = admin.create_topics({n: {"num_partitions": 4, "replication_factor": 1}
                                      for n in names}, raise_errors=False)  # fmt: skip
    finally:
        admin.close()
    assert sorted((t["name"], t["error_code"]) for t in result["topics"]) == [
        (n, 0) for n in sorted(names)]


def _metrics(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}  # fmt: skip


def test_quotas_apply_without_restart_and_survive_kill_9(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", settings=WINDOWS, admin=True)
    broker.start()
    try:
        topic = _id("quota-kill")
        create_topic(broker.bootstrap, topic)
        cli = Cli(broker.bootstrap)
        # the default user: every ANONYMOUS client, whatever its client id
        _set(broker, ["--user-defaults"], "producer_byte_rate=100000")
        load = _Load()
        _produce(broker.bootstrap, topic, _id("any"), time.monotonic() + 3, load)
        assert load.throttles, "the quota applied without a restart"
        # the quota metrics: the default user's measurement, per user (no client id label)
        series = _metrics(broker.admin_url)
        tags = (("client_id", ""), ("user", "ANONYMOUS"))
        assert series[("kafka_server_produce_throttled_responses_total", tags)] > 0
        assert series[("kafka_server_produce_throttle_time_ms_total", tags)] > 0
        assert series[("kafka_server_produce_quota", tags)] == 100000
        assert 0 < series[("kafka_server_produce_byte_rate", tags)] < 1_000_000
        broker.kill()
        broker.start()
        assert cli.lines("quota", "describe", "--user-defaults") == [
            "Quota configs for the default user-principal are producer_byte_rate=100000.0"]
        load = _Load()
        _produce(broker.bootstrap, topic, _id("after"), time.monotonic() + 3, load)
        assert load.throttles, "the quota is in force after kill -9"
        cli.ok("quota", "alter", "--user-defaults", "--delete-config", "producer_byte_rate")
        load = _Load()
        _produce(broker.bootstrap, topic, _id("free"), time.monotonic() + 2, load)
        assert not load.throttles
    finally:
        broker.stop()
