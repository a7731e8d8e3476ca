"""A wall-clock jump under a real broker (issue 28): Kafka's wall-vs-monotonic rules.

The broker's wall clock is stepped back a day and forward again while its monotonic clock runs
on (:mod:`strom.testing.clockjump`: an NTP step). What follows the wall clock in Kafka follows
it here: LogAppendTime stamps, retention (a segment goes once its newest record is older than
``retention.ms`` by the wall clock), transaction timeouts (Kafka compares the transaction's
wall-clock start with the wall clock). What must not, does not: consumer-group session
timeouts run on monotonic time, so a member survives a jump of an hour; and nothing is
deleted early: after the clock goes back, records written "in the future" stay, and a step
forward smaller than ``retention.ms`` deletes nothing. Each test checks the jump landed (the
broker's LogAppendTime moved with it).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from strom.testing import BrokerProcess
from strom.testing.clockjump import ClockJump
from strom.testing.workload import QUIET
from tests.integration.test_disk_faults import producer, send

DAY_MS = 86_400_000
HOUR_MS = 3_600_000


def broker_time(bootstrap: str, topic: str = "stamp") -> int:
    """The broker's wall clock now, as a LogAppendTime stamp of a record written to
    ``topic`` (a LogAppendTime topic)."""
    p = producer(bootstrap)
    out: list[Any] = []
    p.produce(topic, b"t", on_delivery=lambda err, msg: out.append((err, msg)))
    p.flush(10)
    err, msg = out[0]
    assert err is None, err
    return int(msg.timestamp()[1])


def earliest(bootstrap: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "x", "logger": QUIET})
    try:
        return int(c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[0])
    finally:
        c.close()


def test_wall_clock_jumps_follow_kafkas_rules(tmp_path: Path) -> None:
    jump = ClockJump(tmp_path / "clock")
    settings = {"log.retention.check.interval.ms": "200",
                "transaction.abort.timed.out.transaction.cleanup.interval.ms": "300"}  # fmt: skip
    broker = BrokerProcess(tmp_path / "data", log_file=tmp_path / "broker.log",
                           settings=settings, env=jump.environment())  # fmt: skip
    with broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, "logger": QUIET})
        made = admin.create_topics([
            NewTopic("stamp", 1, 1, config={"message.timestamp.type": "LogAppendTime"}),
            NewTopic("kept", 1, 1, config={"retention.ms": str(10 * 60_000),
                                           "segment.bytes": "2048"}),
        ])  # fmt: skip
        for f in made.values():
            f.result(15)
        before = broker_time(broker.bootstrap)
        assert abs(before - time.time() * 1000) < 60_000
        p = producer(broker.bootstrap)
        for i in range(40):  # CreateTime: the client's (real) clock; several segments
            assert send(p, "kept", b"k%d-" % i + b"x" * 200) is None

        jump.step(-DAY_MS)  # back one day
        stamped = broker_time(broker.bootstrap)
        assert before - DAY_MS - 5_000 < stamped < before - DAY_MS + 60_000, "no jump"
        for i in range(40, 60):
            assert send(p, "kept", b"k%d-" % i + b"x" * 200) is None
        time.sleep(1.5)  # several retention checks
        assert earliest(broker.bootstrap, "kept") == 0, "deleted after the clock went back"

        jump.step(DAY_MS + 5 * 60_000)  # forward again, 5 min past real time (< retention)
        assert broker_time(broker.bootstrap) > before + 4 * 60_000
        time.sleep(1.5)
        assert earliest(broker.bootstrap, "kept") == 0, "deleted before retention.ms passed"

        jump.step(20 * 60_000)  # now past retention.ms by the wall clock: Kafka deletes
        deadline = time.monotonic() + 10
        while earliest(broker.bootstrap, "kept") == 0:
            assert time.monotonic() < deadline, "retention never applied after the jump"
            time.sleep(0.2)
        jump.step(-25 * 60_000)  # back to real time for what follows


def test_session_timeouts_are_monotonic_transaction_timeouts_wall(tmp_path: Path) -> None:
    jump = ClockJump(tmp_path / "clock")
    settings = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "300",
                "group.initial.rebalance.delay.ms": "0"}  # fmt: skip
    broker = BrokerProcess(tmp_path / "data", log_file=tmp_path / "broker.log",
                           settings=settings, env=jump.environment())  # fmt: skip
    with broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, "logger": QUIET})
        made = admin.create_topics([
            NewTopic("stamp", 1, 1, config={"message.timestamp.type": "LogAppendTime"}),
            NewTopic("g", 1, 1), NewTopic("tx", 1, 1)])  # fmt: skip
        for f in made.values():
            f.result(15)
        # a group member with a 6 s session, heartbeating
        assigned: list[int] = []
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "jumpers",
                      "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
                      "logger": QUIET})  # fmt: skip
        c.subscribe(["g"], on_assign=lambda _c, parts: assigned.append(len(parts)))
        deadline = time.monotonic() + 30
        while not assigned:
            assert time.monotonic() < deadline, "never joined"
            c.poll(0.2)
        # an open transaction with a 60 s timeout
        tp = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "jumper",
                       "transaction.timeout.ms": 60_000, "logger": QUIET})  # fmt: skip
        tp.init_transactions(30)
        tp.begin_transaction()
        tp.produce("tx", b"open")
        tp.flush(10)
        before = broker_time(broker.bootstrap)
        jump.step(HOUR_MS)  # forward one hour
        assert broker_time(broker.bootstrap) > before + HOUR_MS - 5_000, "no jump"
        end = time.monotonic() + 4  # the member keeps heartbeating: its session holds
        while time.monotonic() < end:
            c.poll(0.2)
        assert assigned == [1], f"the member was expired and re-joined: {assigned}"
        # the transaction, older than its timeout by the wall clock, was aborted (Kafka's rule)
        time.sleep(1.5)
        try:
            tp.commit_transaction(10)
            committed = True
        except KafkaException:
            committed = False
        assert not committed, "a transaction older than its timeout by the wall clock committed"
        assert "aborting a transaction open for" in broker.log_tail(200)
        c.close()
        jump.step(-HOUR_MS)
