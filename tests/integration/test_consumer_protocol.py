"""KIP-848's consumer group protocol with confluent-kafka (``group.protocol=consumer``).

Against a real strom broker: members split partitions and read each record once; a member
leaving or crashing hands its partitions over while the others keep reading (the longest gap
of the others is measured: no stop-the-world); commits resume a restarted member; a static
member restarts into its own partitions; classic and consumer members share one group during an
upgrade. Then librdkafka's own KIP-848 cases (its tests 0113 "cooperative rebalance" and 0147
"consumer group consumer"), as far as they need a broker rather than its mock cluster:
incremental assignment callbacks, subscription changes, regex subscriptions, partitions added
to a subscribed topic, a subscribed topic deleted, a commit during a rebalance, the heartbeat
interval and session timeout given by the broker and by group configs.

Timeouts are short (1 s minimum sessions, 250 ms heartbeats), so the module runs in about a
minute.
"""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions

from strom.admin.wire import WireConnection
from strom.testing.rebalance import (
    SteadyProducer,
    TimedConsumer,
    consumer_process,
    longest_gap,
    wait_for,
)
from strom.testing.workload import QUIET
from tests.integration.clients import create_topic, produce
from tests.topology import module_broker

SESSION_MS = 3000
HEARTBEAT_MS = 250
SETTINGS = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "group.consumer.heartbeat.interval.ms": str(HEARTBEAT_MS),
    "group.consumer.min.heartbeat.interval.ms": "100",
    "group.consumer.session.timeout.ms": str(SESSION_MS),
    "group.consumer.min.session.timeout.ms": "1000",
    "offsets.topic.num.partitions": "4",
}
#: a member that keeps its partitions is never without records longer than this while another
#: member leaves or crashes (records arrive every 20 ms per partition)
MAX_GAP_S = 1.0


@pytest.fixture(scope="module")
def kbroker(topology: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with module_broker(topology, tmp_path_factory.mktemp("kip848"), SETTINGS) as proc:
        yield proc


def group_name() -> str:
    return f"g848-{uuid.uuid4().hex[:8]}"


def new_consumer(bootstrap: str, group: str, **conf: Any) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                     "group.protocol": "consumer", "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, "fetch.wait.max.ms": 50, "logger": QUIET,
                     **conf})  # fmt: skip


def assigned(c: Consumer) -> set[tuple[str, int]]:
    return {(tp.topic, tp.partition) for tp in c.assignment()}


def poll_until(consumers: list[Consumer], done: Any, timeout: float, what: str,
               got: dict[int, list[Any]] | None = None, tolerate: tuple[int, ...] = ()) -> None:  # fmt: skip
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        for c in consumers:
            msg = c.poll(0.05)
            if msg is None:
                continue
            if msg.error():
                assert msg.error().code() in (KafkaError._PARTITION_EOF, *tolerate), msg.error()
                continue
            if got is not None:
                got.setdefault(id(c), []).append(msg)


def numbered(bootstrap: str, topic: str, partitions: int, count: int) -> set[tuple[int, bytes]]:
    msgs = [{"value": f"{p}:{i}".encode(), "partition": p}
            for i in range(count) for p in range(partitions)]  # fmt: skip
    produce(bootstrap, topic, msgs)
    return {(m["partition"], m["value"]) for m in msgs}  # type: ignore[misc]


def describe(bootstrap: str, group: str) -> Any:
    admin = AdminClient({"bootstrap.servers": bootstrap, "logger": QUIET})
    return admin.describe_consumer_groups([group], request_timeout=10)[group].result(15)


# the protocol with real clients ------------------------------------------------------------
def test_members_split_partitions_and_read_every_record_once(kbroker, topic_name) -> None:
    create_topic(kbroker.bootstrap, topic_name, 6)
    group = group_name()
    members = [new_consumer(kbroker.bootstrap, group) for _ in range(3)]
    try:
        for c in members:
            c.subscribe([topic_name])
        poll_until(members, lambda: all(len(assigned(c)) == 2 for c in members), 20,
                   "three members with two partitions each")  # fmt: skip
        owned = [assigned(c) for c in members]
        assert set().union(*owned) == {(topic_name, p) for p in range(6)}
        expected = numbered(kbroker.bootstrap, topic_name, 6, 30)
        got: dict[int, list[Any]] = {}
        poll_until(members, lambda: sum(len(v) for v in got.values()) >= len(expected), 20,
                   "every record", got)  # fmt: skip
        read = [(m.partition(), m.value()) for c in members for m in got.get(id(c), [])]
        assert sorted(read) == sorted(expected)  # each once
        for c in members:
            assert {(topic_name, m.partition()) for m in got.get(id(c), [])} <= assigned(c)
        desc = describe(kbroker.bootstrap, group)
        assert desc.type.name == "CONSUMER" and desc.state.name == "STABLE"
        assert sorted(len(m.assignment.topic_partitions) for m in desc.members) == [2, 2, 2]
    finally:
        for c in members:
            c.close()


def _steady_group(kbroker: Any, topic: str, n: int) -> tuple[SteadyProducer, list[TimedConsumer]]:
    create_topic(kbroker.bootstrap, topic, 6)
    group = group_name()
    producer = SteadyProducer(kbroker.bootstrap, topic, 6).start()
    members = [TimedConsumer(kbroker.bootstrap, group, topic, f"m{i}",
                             {"group.protocol": "consumer"}).start() for i in range(n)]  # fmt: skip
    wait_for(lambda: all(len(m.assignment) == 6 // n for m in members)
             and set().union(*(m.assignment for m in members)) == set(range(6)), 30,
             f"{n} members sharing 6 partitions")  # fmt: skip
    time.sleep(0.5)
    return producer, members


def test_a_leaving_member_does_not_pause_the_others(kbroker, topic_name) -> None:
    producer, members = _steady_group(kbroker, topic_name, 3)
    leaver, survivors = members[0], members[1:]
    try:
        kept = {m.name: set(m.assignment) for m in survivors}
        moved = set(leaver.assignment)
        start = time.monotonic()
        leaver.stop(close=True)
        wait_for(lambda: set().union(*(m.assignment for m in survivors)) == set(range(6)), 15,
                 "the survivors to take over")  # fmt: skip
        taken_over = time.monotonic() - start
        wait_for(lambda: all(m.arrivals.get(p) and m.arrivals[p][-1] > start
                             for m in survivors for p in m.assignment & moved), 10,
                 "records of the moved partitions")  # fmt: skip
        time.sleep(0.5)
        end = time.monotonic()
        for m in survivors:
            assert kept[m.name] <= m.assignment, "a survivor lost a partition it had"
        gap = longest_gap(survivors, kept, start - 0.5, end)
        assert gap < MAX_GAP_S, f"the survivors paused {gap:.3f} s (took over in {taken_over:.2f} s)"
        assert taken_over < 5
    finally:
        for m in survivors:
            m.stop()
        producer.stop()


def test_a_crashed_member_is_replaced_after_its_session_without_pausing_the_others(
    kbroker, topic_name
) -> None:
    create_topic(kbroker.bootstrap, topic_name, 6)
    group = group_name()
    producer = SteadyProducer(kbroker.bootstrap, topic_name, 6).start()
    victim = consumer_process(kbroker.bootstrap, group, topic_name, {"group.protocol": "consumer"})
    survivors: list[TimedConsumer] = []
    try:
        lines: list[str] = []
        threading.Thread(target=lambda: lines.extend(iter(victim.stdout.readline, "")),  # type: ignore[union-attr]
                         daemon=True).start()  # fmt: skip
        wait_for(lambda: any(line.startswith("ASSIGNED") for line in lines), 20, "the victim's partitions")
        survivors = [TimedConsumer(kbroker.bootstrap, group, topic_name, f"s{i}",
                                   {"group.protocol": "consumer"}).start() for i in range(2)]  # fmt: skip
        wait_for(lambda: all(len(m.assignment) == 2 for m in survivors), 30,
                 "two partitions for each survivor")  # fmt: skip
        time.sleep(0.5)
        kept = {m.name: set(m.assignment) for m in survivors}
        start = time.monotonic()
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        wait_for(lambda: set().union(*(m.assignment for m in survivors)) == set(range(6)),
                 SESSION_MS / 1000 + 10, "the survivors to take over")  # fmt: skip
        taken_over = time.monotonic() - start
        time.sleep(0.5)
        gap = longest_gap(survivors, kept, start - 0.5, time.monotonic())
        assert gap < MAX_GAP_S, f"the survivors paused {gap:.3f} s"
        # the crash is found out by the session timeout, not before
        assert SESSION_MS / 1000 * 0.8 < taken_over < SESSION_MS / 1000 + 8
    finally:
        if victim.poll() is None:
            victim.kill()
        for m in survivors:
            m.stop()
        producer.stop()


def test_commits_resume_a_member_that_restarts(kbroker, topic_name) -> None:
    create_topic(kbroker.bootstrap, topic_name, 2)
    group = group_name()
    expected = numbered(kbroker.bootstrap, topic_name, 2, 20)
    first = new_consumer(kbroker.bootstrap, group)
    first.subscribe([topic_name])
    got: dict[int, list[Any]] = {}
    poll_until([first], lambda: len(got.get(id(first), [])) >= 10, 20, "ten records", got)
    done = got[id(first)][:10]
    committed = first.commit(offsets=[TopicPartition(topic_name, m.partition(), m.offset() + 1)
                                      for m in done], asynchronous=False)  # fmt: skip
    assert all(tp.error is None for tp in committed)
    last = {}
    for m in done:
        last[m.partition()] = m.offset() + 1
    first.close()
    second = new_consumer(kbroker.bootstrap, group)
    try:
        second.subscribe([topic_name])
        got2: dict[int, list[Any]] = {}
        poll_until([second], lambda: len(got2.get(id(second), [])) >= len(expected) - sum(last.values()),
                   20, "the rest", got2)  # fmt: skip
        firsts: dict[int, int] = {}
        for m in got2[id(second)]:
            firsts.setdefault(m.partition(), m.offset())
        for p, offset in last.items():
            assert firsts.get(p, offset) == offset  # resumed exactly at the commit
        read = {(m.partition(), m.value()) for m in done} | {(m.partition(), m.value()) for m in got2[id(second)]}
        assert read == expected
        committed2 = second.committed([TopicPartition(topic_name, p) for p in last], timeout=10)
        assert {tp.partition: tp.offset for tp in committed2} == last
    finally:
        second.close()


def test_a_static_member_restarts_into_its_own_partitions(kbroker, topic_name) -> None:
    create_topic(kbroker.bootstrap, topic_name, 4)
    group = group_name()
    other = new_consumer(kbroker.bootstrap, group)
    static = new_consumer(kbroker.bootstrap, group, **{"group.instance.id": "inst-1"})
    try:
        other.subscribe([topic_name])
        static.subscribe([topic_name])
        poll_until([other, static], lambda: len(assigned(other)) == 2 and len(assigned(static)) == 2,
                   20, "two partitions each")  # fmt: skip
        mine, others = assigned(static), assigned(other)
        static.close()  # a static member leaves for now (epoch -2): its partitions wait for it
        time.sleep(1.0)
        poll_until([other], lambda: True, 1, "")
        assert assigned(other) == others
        static = new_consumer(kbroker.bootstrap, group, **{"group.instance.id": "inst-1"})
        static.subscribe([topic_name])
        poll_until([other, static], lambda: assigned(static) == mine, 20, "its own partitions back")
        assert assigned(other) == others
        desc = describe(kbroker.bootstrap, group)
        assert sorted(m.group_instance_id or "" for m in desc.members) == ["", "inst-1"]
    finally:
        other.close()
        static.close()


def test_classic_and_consumer_members_share_one_group_during_an_upgrade(kbroker, topic_name) -> None:
    create_topic(kbroker.bootstrap, topic_name, 4)
    group = group_name()
    classic = Consumer({"bootstrap.servers": kbroker.bootstrap, "group.id": group,
                        "group.protocol": "classic", "auto.offset.reset": "earliest",
                        "enable.auto.commit": False, "session.timeout.ms": 6000,
                        "heartbeat.interval.ms": 300, "logger": QUIET})  # fmt: skip
    upgraded: Consumer | None = None
    try:
        classic.subscribe([topic_name])
        poll_until([classic], lambda: len(assigned(classic)) == 4, 20, "the classic member alone")
        assert describe(kbroker.bootstrap, group).type.name == "CLASSIC"
        upgraded = new_consumer(kbroker.bootstrap, group)
        upgraded.subscribe([topic_name])
        poll_until([classic, upgraded], lambda: len(assigned(classic)) == 2 and len(assigned(upgraded)) == 2,
                   30, "the classic and the new member with two partitions each")  # fmt: skip
        assert not assigned(classic) & assigned(upgraded)
        desc = describe(kbroker.bootstrap, group)
        assert desc.type.name == "CONSUMER"
        expected = numbered(kbroker.bootstrap, topic_name, 4, 10)
        got: dict[int, list[Any]] = {}
        poll_until([classic, upgraded], lambda: sum(len(v) for v in got.values()) >= len(expected),
                   20, "every record", got)  # fmt: skip
        read = sorted((m.partition(), m.value()) for v in got.values() for m in v)
        assert read == sorted(expected)
        # the classic member commits with its generation (the member epoch)
        msgs = got.get(id(classic), [])
        assert msgs
        result = classic.commit(message=msgs[-1], asynchronous=False)
        assert all(tp.error is None for tp in result)
        # the classic member upgrades too (leaves): the new member holds everything
        classic.close()
        poll_until([upgraded], lambda: len(assigned(upgraded)) == 4, 20, "everything on the new member")
    finally:
        if upgraded is not None:
            upgraded.close()


# librdkafka's KIP-848 cases (0113 cooperative rebalance, 0147 consumer group consumer) -----
def test_incremental_callbacks_and_subscription_changes(kbroker, topic_name) -> None:
    """0113 d/e/u: adding and removing a subscribed topic moves only those partitions, and the
    callbacks get only what changed (the cooperative rebalance protocol)."""
    t1, t2 = f"{topic_name}-1", f"{topic_name}-2"
    create_topic(kbroker.bootstrap, t1, 2)
    create_topic(kbroker.bootstrap, t2, 2)
    events: list[tuple[str, set[tuple[str, int]]]] = []
    c = new_consumer(kbroker.bootstrap, group_name())

    def on_assign(cons: Consumer, parts: list[TopicPartition]) -> None:
        events.append(("assign", {(p.topic, p.partition) for p in parts}))

    def on_revoke(cons: Consumer, parts: list[TopicPartition]) -> None:
        events.append(("revoke", {(p.topic, p.partition) for p in parts}))

    try:
        c.subscribe([t1], on_assign=on_assign, on_revoke=on_revoke)
        poll_until([c], lambda: assigned(c) == {(t1, 0), (t1, 1)}, 20, "t1")
        c.subscribe([t1, t2], on_assign=on_assign, on_revoke=on_revoke)
        poll_until([c], lambda: assigned(c) == {(t1, 0), (t1, 1), (t2, 0), (t2, 1)}, 20, "t1 and t2")
        c.subscribe([t2], on_assign=on_assign, on_revoke=on_revoke)
        poll_until([c], lambda: assigned(c) == {(t2, 0), (t2, 1)}, 20, "t2 alone")
        nonempty = [(kind, parts) for kind, parts in events if parts]
        assert nonempty == [("assign", {(t1, 0), (t1, 1)}), ("assign", {(t2, 0), (t2, 1)}),
                            ("revoke", {(t1, 0), (t1, 1)})]  # fmt: skip
    finally:
        c.close()


def test_regex_subscription_picks_up_new_topics(kbroker, topic_name) -> None:
    """0113 n (wildcards) and 0147's regex subscription: the broker resolves the RE2 pattern."""
    prefix = f"rx{uuid.uuid4().hex[:6]}"
    create_topic(kbroker.bootstrap, f"{prefix}-a", 1)
    create_topic(kbroker.bootstrap, f"{prefix}x", 1)  # no dash: not matched
    c = new_consumer(kbroker.bootstrap, group_name(), **{"topic.metadata.refresh.interval.ms": 500})
    try:
        c.subscribe([f"^{prefix}-[a-z]+"])
        poll_until([c], lambda: assigned(c) == {(f"{prefix}-a", 0)}, 20, "the matching topic")
        create_topic(kbroker.bootstrap, f"{prefix}-b", 2)
        poll_until([c], lambda: assigned(c) == {(f"{prefix}-a", 0), (f"{prefix}-b", 0), (f"{prefix}-b", 1)},
                   20, "the new matching topic")  # fmt: skip
    finally:
        c.close()


def test_partitions_added_to_a_subscribed_topic_are_assigned(kbroker, topic_name) -> None:
    """0113 k: CreatePartitions on a subscribed topic gives the new partitions to the group."""
    create_topic(kbroker.bootstrap, topic_name, 2)
    a, b = (new_consumer(kbroker.bootstrap, g := group_name()), None)
    b = new_consumer(kbroker.bootstrap, g)
    try:
        a.subscribe([topic_name])
        b.subscribe([topic_name])
        poll_until([a, b], lambda: len(assigned(a)) == 1 and len(assigned(b)) == 1, 20, "one each")
        admin = AdminClient({"bootstrap.servers": kbroker.bootstrap, "logger": QUIET})
        admin.create_partitions([NewPartitions(topic_name, 4)])[topic_name].result(15)
        poll_until([a, b], lambda: len(assigned(a)) == 2 and len(assigned(b)) == 2
                   and assigned(a) | assigned(b) == {(topic_name, p) for p in range(4)}, 20,
                   "the new partitions assigned")  # fmt: skip
    finally:
        a.close()
        b.close()


def test_a_deleted_subscribed_topic_is_revoked(kbroker, topic_name) -> None:
    """0113 h: deleting a subscribed topic revokes its partitions, the others stay."""
    keep, gone = f"{topic_name}-keep", f"{topic_name}-gone"
    create_topic(kbroker.bootstrap, keep, 1)
    create_topic(kbroker.bootstrap, gone, 1)
    c = new_consumer(kbroker.bootstrap, group_name())
    try:
        c.subscribe([keep, gone])
        poll_until([c], lambda: assigned(c) == {(keep, 0), (gone, 0)}, 20, "both topics")
        admin = AdminClient({"bootstrap.servers": kbroker.bootstrap, "logger": QUIET})
        admin.delete_topics([gone])[gone].result(15)
        # the client may report the topic it still reads as gone before its revocation
        poll_until([c], lambda: assigned(c) == {(keep, 0)}, 30, "the deleted topic revoked",
                   tolerate=(KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.UNKNOWN_TOPIC_ID))  # fmt: skip
    finally:
        c.close()


def test_a_commit_during_a_rebalance_is_accepted_or_retriable(kbroker, topic_name) -> None:
    """0113 v: commits while members join and leave never fail for good."""
    create_topic(kbroker.bootstrap, topic_name, 4)
    group = group_name()
    numbered(kbroker.bootstrap, topic_name, 4, 50)
    first = new_consumer(kbroker.bootstrap, group)
    first.subscribe([topic_name])
    got: dict[int, list[Any]] = {}
    poll_until([first], lambda: len(got.get(id(first), [])) >= 20, 20, "records", got)
    joiners = [new_consumer(kbroker.bootstrap, group) for _ in range(2)]
    try:
        for j in joiners:
            j.subscribe([topic_name])
        failures = []
        deadline = time.monotonic() + 6
        while time.monotonic() < deadline:
            for c in (first, *joiners):
                msg = c.poll(0.05)
                if msg is None or msg.error():
                    continue
                try:
                    c.commit(message=msg, asynchronous=False)
                except KafkaException as exc:
                    if not exc.args[0].retriable() and exc.args[0].code() not in (
                            KafkaError.STALE_MEMBER_EPOCH, KafkaError.UNKNOWN_MEMBER_ID,
                            KafkaError._NO_OFFSET, KafkaError.REBALANCE_IN_PROGRESS):  # fmt: skip
                        failures.append(exc.args[0])
        assert failures == []
        assert set().union(*(assigned(c) for c in (first, *joiners))) == {(topic_name, p) for p in range(4)}
    finally:
        for c in (first, *joiners):
            c.close()


def _heartbeat(bootstrap: str, group: str, member: str, epoch: int, topics: list[str]) -> Any:
    """A raw ConsumerGroupHeartbeat v1 to the group's coordinator (a single broker here)."""
    with WireConnection(bootstrap) as conn:
        for _ in range(50):
            found = conn.request(10, 4, key_type=0, coordinator_keys=(group,))
            if found.coordinators[0].error_code == 0:
                break
            time.sleep(0.2)
        return conn.request(68, 1, group_id=group, member_id=member, member_epoch=epoch,
                            rebalance_timeout=30000 if epoch == 0 else -1,
                            subscribed_topic_names=tuple(topics) if epoch == 0 else None,
                            topic_partitions=() if epoch == 0 else None)  # fmt: skip


def test_the_broker_sets_heartbeat_interval_and_group_configs_override_it(kbroker, topic_name) -> None:
    """0147's heartbeat interval and session timeout come from the broker; a group's own
    consumer.heartbeat.interval.ms / consumer.session.timeout.ms (IncrementalAlterConfigs on a
    GROUP resource) override them."""
    if "," in kbroker.bootstrap:
        pytest.skip("a raw request to one broker: the single-broker run covers it")
    create_topic(kbroker.bootstrap, topic_name, 1)
    group = group_name()
    first = _heartbeat(kbroker.bootstrap, group, "raw-1", 0, [topic_name])
    assert first.error_code == 0 and first.member_epoch == 1
    assert int(first.heartbeat_interval.total_seconds() * 1000) == HEARTBEAT_MS
    admin = AdminClient({"bootstrap.servers": kbroker.bootstrap, "logger": QUIET})
    resource = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=[
        __import__("confluent_kafka.admin", fromlist=["ConfigEntry"]).ConfigEntry(
            "consumer.heartbeat.interval.ms", "900",
            incremental_operation=__import__("confluent_kafka.admin", fromlist=["AlterConfigOpType"]
                                             ).AlterConfigOpType.SET)])  # fmt: skip
    admin.incremental_alter_configs([resource])[resource].result(15)
    time.sleep(1.2)  # the coordinator reads group configs at most once a second
    again = _heartbeat(kbroker.bootstrap, group, "raw-1", 1, [topic_name])
    assert again.error_code == 0 and int(again.heartbeat_interval.total_seconds() * 1000) == 900
    # the broker's session timeout (3 s) fences a member that stops
    time.sleep(SESSION_MS / 1000 + 1)
    late = _heartbeat(kbroker.bootstrap, group, "raw-1", 1, [topic_name])
    assert late.error_code == KafkaError.UNKNOWN_MEMBER_ID


def test_the_cli_shows_each_groups_type_and_state(kbroker, topic_name) -> None:
    """``strom group list --type --state`` and ``group describe --state`` (over strom.admin):
    a KIP-848 group's type, and its state as its coordinator names it."""
    from tests.integration.cli_helpers import Cli, parse_table

    create_topic(kbroker.bootstrap, topic_name, 2)
    new, old = group_name(), group_name()
    member = new_consumer(kbroker.bootstrap, new)
    classic = Consumer({"bootstrap.servers": kbroker.bootstrap, "group.id": old,
                        "group.protocol": "classic", "session.timeout.ms": 6000,
                        "logger": QUIET})  # fmt: skip
    try:
        member.subscribe([topic_name])
        classic.subscribe([topic_name])
        poll_until([member, classic], lambda: len(assigned(member)) == 2 and len(assigned(classic)) == 2,
                   20, "both groups reading")  # fmt: skip
        cli = Cli(kbroker.bootstrap)
        rows = {r["GROUP"]: r for r in parse_table(cli.ok("group", "list", "--type", "--state", "Stable"))}
        assert (rows[new]["TYPE"], rows[new]["STATE"]) == ("consumer", "Stable")
        assert (rows[old]["TYPE"], rows[old]["STATE"]) == ("classic", "Stable")
        only = cli.lines("group", "list", "--type", "consumer")
        assert new in " ".join(only) and old not in " ".join(only)
        [state] = parse_table(cli.ok("group", "describe", new, "--state"))
        assert (state["TYPE"], state["STATE"], state["#MEMBERS"]) == ("consumer", "Stable", "1")
        assert "unknown group state" in cli.fail("group", "list", "--state", "Sleepy")
        assert new not in cli.ok("group", "list", "--state", "Reconciling")
    finally:
        member.close()
        classic.close()
