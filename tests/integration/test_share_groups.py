"""Share groups (KIP-932) with confluent-kafka's ShareConsumer (librdkafka 2.16) against strom.

Each test has its own topic and group; the group reads from the earliest offset
(``share.auto.offset.reset`` set as a group config with IncrementalAlterConfigs) and short locks
where the test needs locks to run out. Every test asserts the data: which values reached which
consumer, how often (``delivery_count``), and which never came back.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import AcknowledgeType

from strom.testing import BrokerProcess
from tests.integration.clients import create_topic, produce
from tests.integration.share_helpers import (
    BROKER_SETTINGS,
    Worker,
    set_group_configs,
    share_consumer,
    wait_for,
)
from tests.topology import module_broker

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def broker(topology: str, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    with module_broker(topology, tmp_path_factory.mktemp("share"), BROKER_SETTINGS) as b:
        yield b


def _values(n: int, tag: str) -> list[bytes]:
    return [f"{tag}-{i}".encode() for i in range(n)]


def _produce(bootstrap: str, topic: str, values: list[bytes], per_batch: int = 5) -> None:
    delivered = produce(bootstrap, topic, ({"value": v} for v in values),
                        **{"batch.num.messages": per_batch, "linger.ms": 2})  # fmt: skip
    assert len(delivered) == len(values)


def test_three_consumers_share_one_partition_each_message_once(broker, topic_name) -> None:
    create_topic(broker.bootstrap, topic_name, 1)
    group = f"g-{topic_name}"
    set_group_configs(broker.bootstrap, group, share_auto_offset_reset="earliest")
    values = _values(300, "job")
    _produce(broker.bootstrap, topic_name, values)
    workers = [Worker(broker.bootstrap, group, topic_name, f"w{i}", per_record_s=0.003).start()
               for i in range(3)]  # fmt: skip
    try:
        wait_for(lambda: sum(len(w.deliveries) for w in workers) >= len(values), 60,
                 "every record delivered")  # fmt: skip
        time.sleep(1.0)  # anything delivered twice would show up now
    finally:
        for w in workers:
            w.stop()
    got = Counter(v for w in workers for v in w.values())
    assert set(got) == set(values)
    assert [v for v, n in got.items() if n > 1] == []  # each message reached exactly one
    assert all(w.deliveries for w in workers), [len(w.deliveries) for w in workers]
    assert not any(w.commit_errors for w in workers), [w.commit_errors for w in workers]
    assert all(d.delivery_count == 1 for w in workers for d in w.deliveries)


def test_release_redelivers_and_reject_never_returns(broker, topic_name) -> None:
    create_topic(broker.bootstrap, topic_name, 1)
    group = f"g-{topic_name}"
    set_group_configs(broker.bootstrap, group, share_auto_offset_reset="earliest")
    values = _values(20, "r")
    _produce(broker.bootstrap, topic_name, values)
    released_once: set[bytes] = set()

    def decide(msg):  # type: ignore[no-untyped-def]
        v = msg.value()
        if v == b"r-3":
            return AcknowledgeType.REJECT
        if v == b"r-7" and v not in released_once:
            released_once.add(v)
            return AcknowledgeType.RELEASE
        return AcknowledgeType.ACCEPT

    worker = Worker(broker.bootstrap, group, topic_name, "w", decide=decide).start()
    try:
        wait_for(lambda: len(worker.deliveries) >= 21, 30, "20 records and one redelivery")
        time.sleep(1.5)  # a rejected record coming back would show up now
    finally:
        worker.stop()
    counts = Counter(worker.values())
    assert counts[b"r-7"] == 2 and counts[b"r-3"] == 1
    assert {v for v, n in counts.items() if n != 1} == {b"r-7"}
    seven = [d.delivery_count for d in worker.deliveries if d.value == b"r-7"]
    assert seven == [1, 2]
    # a new consumer of the group finds nothing left: all were accepted or rejected
    late = Worker(broker.bootstrap, group, topic_name, "late").start()
    time.sleep(2.0)
    late.stop()
    assert late.deliveries == []


def test_delivery_limit_archives_the_record(broker, topic_name) -> None:
    create_topic(broker.bootstrap, topic_name, 1)
    group = f"g-{topic_name}"
    set_group_configs(broker.bootstrap, group, share_auto_offset_reset="earliest",
                      share_delivery_count_limit="3")  # fmt: skip
    _produce(broker.bootstrap, topic_name, [b"poison", b"fine"], per_batch=1)

    def decide(msg):  # type: ignore[no-untyped-def]
        return AcknowledgeType.RELEASE if msg.value() == b"poison" else AcknowledgeType.ACCEPT

    worker = Worker(broker.bootstrap, group, topic_name, "w", decide=decide).start()
    try:
        wait_for(lambda: worker.values().count(b"poison") >= 3, 30, "three deliveries of the poison")
        time.sleep(2.0)  # a fourth delivery would show up now
    finally:
        worker.stop()
    poison = [d.delivery_count for d in worker.deliveries if d.value == b"poison"]
    assert poison == [1, 2, 3]
    assert worker.values().count(b"fine") == 1


def test_a_killed_consumers_records_go_to_another(broker, topic_name, tmp_path) -> None:
    """kill -9 of a consumer holding acquired records: another member of the group gets them
    (delivery count 2) — at the latest when their lock (3 s here) runs out."""
    create_topic(broker.bootstrap, topic_name, 1)
    group = f"g-{topic_name}"
    set_group_configs(broker.bootstrap, group, share_auto_offset_reset="earliest",
                      share_record_lock_duration_ms="3000")  # fmt: skip
    values = _values(10, "k")
    _produce(broker.bootstrap, topic_name, values, per_batch=10)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    holder = subprocess.Popen([sys.executable, "-m", "tests.integration.share_holder",
                               broker.bootstrap, group, topic_name], stdout=subprocess.PIPE,
                              text=True, cwd=ROOT, env=env)  # fmt: skip
    try:
        line = holder.stdout.readline() if holder.stdout else ""
        assert line.startswith("HELD"), line
        held = [int(x) for x in line.split()[1:]]
        assert held
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        killed_at = time.monotonic()
        taker = Worker(broker.bootstrap, group, topic_name, "taker").start()
        try:
            wait_for(lambda: len(taker.deliveries) >= len(values), 30, "the held records again")
        finally:
            taker.stop()
        assert time.monotonic() - killed_at < 3.0 + 10  # the lock, plus a consumer's start
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(10)
    again = {d.offset: d.delivery_count for d in taker.deliveries}
    assert sorted(again) == list(range(len(values)))
    assert all(again[o] == 2 for o in held), again
    assert Counter(taker.values()) == Counter(values)


def test_implicit_mode_accepts_on_the_next_poll(broker, topic_name) -> None:
    create_topic(broker.bootstrap, topic_name, 1)
    group = f"g-{topic_name}"
    set_group_configs(broker.bootstrap, group, share_auto_offset_reset="earliest")
    values = _values(30, "i")
    _produce(broker.bootstrap, topic_name, values)
    consumer = share_consumer(broker.bootstrap, group, topic_name)
    got: list[bytes] = []
    try:
        deadline = time.monotonic() + 30
        while len(got) < len(values) and time.monotonic() < deadline:
            got += [m.value() for m in consumer.poll(0.5) if not m.error()]
        results = consumer.commit_sync(30)
        assert all(err is None for err in results.values()), results
    finally:
        consumer.close()
    assert sorted(got) == sorted(values)
    second = share_consumer(broker.bootstrap, group, topic_name)
    try:
        leftovers = [m for m in second.poll(3.0) if not m.error()]
    finally:
        second.close()
    assert leftovers == []


def test_read_committed_never_delivers_aborted_records(broker, topic_name) -> None:
    from confluent_kafka import Producer

    create_topic(broker.bootstrap, topic_name, 1)
    group = f"g-{topic_name}"
    set_group_configs(broker.bootstrap, group, share_auto_offset_reset="earliest",
                      share_isolation_level="read_committed")  # fmt: skip
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"t-{topic_name}"})
    producer.init_transactions(30)
    for i, commit in enumerate([True, False, True]):
        producer.begin_transaction()
        for j in range(5):
            producer.produce(topic_name, f"tx{i}-{j}".encode())
        producer.flush(30)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    worker = Worker(broker.bootstrap, group, topic_name, "w").start()
    try:
        wait_for(lambda: len(worker.deliveries) >= 10, 30, "the committed records")
        time.sleep(1.5)
    finally:
        worker.stop()
    assert sorted(worker.values()) == sorted(f"tx{i}-{j}".encode() for i in (0, 2) for j in range(5))


def _scrape(url: str) -> dict[str, float]:
    import urllib.request

    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines() if line and not line.startswith("#")}  # fmt: skip


def test_acknowledged_state_survives_a_broker_kill_9(tmp_path) -> None:
    """Accepted records are never delivered again after kill -9 of the broker; records that
    were acquired but not acknowledged (and those never delivered) are."""
    proc = BrokerProcess(tmp_path / "data", settings=BROKER_SETTINGS, admin=True)
    proc.start()
    try:
        topic, group = "jobs", "crash-group"
        create_topic(proc.bootstrap, topic, 1)
        set_group_configs(proc.bootstrap, group, share_auto_offset_reset="earliest")
        values = _values(40, "c")
        _produce(proc.bootstrap, topic, values, per_batch=10)
        accepted: list[bytes] = []
        held: list[bytes] = []

        def decide(msg):  # type: ignore[no-untyped-def]
            if len(accepted) < 15:
                accepted.append(msg.value())
                return AcknowledgeType.ACCEPT
            held.append(msg.value())
            return None  # stays acquired: in flight when the broker dies

        worker = Worker(proc.bootstrap, group, topic, "before", decide=decide).start()
        try:
            wait_for(lambda: worker.holding, 30, "15 accepted (committed) and the rest held")
            assert len(accepted) == 15 and held and not worker.commit_errors
            metrics = _scrape(proc.admin_url)
            assert metrics["kafka_server_share_group_metrics_records_accepted_total"] == 15
            assert metrics["kafka_server_share_group_metrics_records_acquired_total"] >= 15 + len(held)
            assert metrics['kafka_sharegroup_members{sharegroup="crash-group"}'] == 1
            assert metrics['kafka_sharepartition_acquired_records{sharegroup="crash-group",'
                           'topic="jobs",partition="0"}'] >= len(held)
            assert metrics['kafka_sharepartition_start_offset{sharegroup="crash-group",'
                           'topic="jobs",partition="0"}'] == 15
            proc.kill()
        finally:
            worker.stop_event.set()
        proc.start()
        after = Worker(proc.bootstrap, group, topic, "after").start()
        try:
            wait_for(lambda: len(after.deliveries) >= len(values) - 15, 60, "the rest after restart")
            time.sleep(1.5)
        finally:
            after.stop()
        worker.stop()
        assert not worker.commit_errors, worker.commit_errors
        assert set(after.values()).isdisjoint(accepted)
        assert Counter(after.values()) == Counter(v for v in values if v not in accepted)
        assert set(held) <= set(after.values())
    finally:
        proc.stop()


def test_cli_and_admin_list_describe_reset_and_delete_a_share_group(broker, topic_name) -> None:
    from strom.admin import share_groups
    from strom.admin.session import ClientSettings, Session
    from strom.protocol.errors import ErrorCode
    from strom.testing.raw import RawConnection
    from tests.integration.cli_helpers import Cli, eventually, parse_table
    from tests.integration.routing import coordinator_of

    cli = Cli(str(broker.bootstrap))
    session = Session(ClientSettings(bootstrap=broker.bootstrap, timeout=15))
    create_topic(broker.bootstrap, topic_name, 1)
    group = f"g-{topic_name}"
    set_group_configs(broker.bootstrap, group, share_auto_offset_reset="earliest")
    _produce(broker.bootstrap, topic_name, _values(10, "a"))
    worker = Worker(broker.bootstrap, group, topic_name, "w").start()
    try:
        wait_for(lambda: len(worker.deliveries) >= 10, 30, "10 records")
        members = parse_table(cli.ok("share-group", "describe", group, "--members"))
        assert [(m["GROUP"], m["#PARTITIONS"], m["ASSIGNMENT"]) for m in members] == [
            (group, "1", f"{topic_name}:0")]
        desc = share_groups.describe_share_group(session, group)
        assert (desc.state, len(desc.members), desc.assignor) == ("Stable", 1, "simple")
        assert desc.members[0].subscribed == [topic_name] and desc.group_epoch >= 1
        error = cli.fail("share-group", "reset-offsets", group, "--topic", topic_name,
                         "--to-earliest", "--execute")  # fmt: skip
        assert "has 1 member(s); stop its consumers first" in error
    finally:
        worker.stop()
    assert group in [g.group for g in share_groups.list_share_groups(session)]
    from strom.admin import groups as consumer_groups

    assert group not in [g.group for g in consumer_groups.list_groups(session)]  # consumer groups
    assert (group, "Empty") in [(g.group, g.state) for g in
                                share_groups.list_share_groups(session, "Empty")]  # fmt: skip

    def offsets() -> list[tuple[str, int, int | None, int | None]]:
        return [(r.topic, r.partition, r.start_offset, r.lag)
                for r in share_groups.offsets(session, group)]  # fmt: skip

    assert eventually(lambda: offsets() == [(topic_name, 0, 10, 0)] or None, timeout=15)
    _produce(broker.bootstrap, topic_name, _values(5, "b"))
    rows = parse_table(cli.ok("share-group", "describe", group))
    assert [(r["GROUP"], r["TOPIC"], r["PARTITION"], r["START-OFFSET"], r["LAG"]) for r in rows] == [
        (group, topic_name, "0", "10", "5")]  # kafka-share-groups.sh's columns
    keys = share_groups.topic_keys(session, [topic_name], group)
    assert share_groups.reset_plan(session, keys, "earliest") == {(topic_name, 0): 0}
    assert offsets() == [(topic_name, 0, 10, 5)]  # a plan changes nothing
    plan = parse_table(cli.ok("share-group", "reset-offsets", group, "--all-topics", "--to-offset",
                              "3", "--execute"))  # fmt: skip
    assert [(r["GROUP"], r["TOPIC"], r["PARTITION"], r["NEW-OFFSET"]) for r in plan] == [
        (group, topic_name, "0", "3")]
    assert offsets() == [(topic_name, 0, 3, 12)]
    again = Worker(broker.bootstrap, group, topic_name, "again").start()
    try:
        wait_for(lambda: len(again.deliveries) >= 12, 30, "the 12 records from offset 3")
        time.sleep(1.0)
    finally:
        again.stop()
    assert sorted(d.offset for d in again.deliveries) == list(range(3, 15))
    # DescribeGroups (v6) says a share group is not a classic group
    with RawConnection(coordinator_of(broker.bootstrap, group)) as conn:
        resp = conn.request(15, 6, groups=(group,), include_authorized_operations=False)
    (described,) = resp.groups
    assert (described.error_code, described.group_state) == (ErrorCode.group_id_not_found, "Dead")
    share_groups.delete_offsets(session, group, [topic_name])
    assert offsets() == []
    from strom.admin.errors import NotFoundError

    with pytest.raises(NotFoundError, match="share group 'no-such-group' does not exist"):
        share_groups.describe_share_group(session, "no-such-group")
    cli.ok("share-group", "delete", group)
    assert group not in [g.group for g in share_groups.list_share_groups(session)]
    session.close()


def test_work_queue_example(broker) -> None:
    """examples/work_queue.py: the jobs done once or dead-lettered by both groups; the share
    group puts more workers to work than the topic has partitions, the classic group cannot."""
    import json

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "work_queue.py"), "--bootstrap",
                           broker.bootstrap, "--jobs", "200", "--workers", "4", "--partitions", "2"],
                          capture_output=True, text=True, timeout=300, env=env)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["ok"] is True
    share, classic = result["share_group"], result["classic_group"]
    for run in (share, classic):
        assert run["done"] + run["dead_lettered"] == 200 and run["dead_lettered"] > 0
        assert run["retries"] > 0
    assert classic["busy_workers"] == 2
    assert share["busy_workers"] > 2
