"""The fault-test workload against one real broker: a Writer thread and read_to_end feed the
history checker; a kill -9 of the broker mid-stream loses nothing acknowledged."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from strom.testing import BrokerProcess
from strom.testing.history import History
from strom.testing.workload import Writer, read_to_end


def create(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def test_writer_and_reader_feed_a_clean_history(tmp_path: Path, topic_name: str) -> None:
    history = History()
    with BrokerProcess(tmp_path / "data") as broker:
        create(broker.bootstrap, topic_name, 3)
        with Writer(broker.bootstrap, topic_name, history, name="w") as writer:
            writer.wait_acked(300)
        read = read_to_end(broker.bootstrap, topic_name, history)
    report = history.check()
    report.assert_ok()
    assert read == report.acknowledged == writer.acked == writer.sent >= 300
    assert {a.partition for a in history.acks} == {0, 1, 2}
    assert history.reads[0].value.startswith(b"w-")


def test_broker_killed_mid_stream_loses_nothing_acknowledged(
    tmp_path: Path, topic_name: str
) -> None:
    history = History()
    with BrokerProcess(tmp_path / "data") as broker:
        create(broker.bootstrap, topic_name, 2)
        with Writer(broker.bootstrap, topic_name, history) as writer:
            writer.wait_acked(200)
            broker.kill()  # kill -9 while writes are in flight
            before = writer.acked
            broker.start()  # same port, same data
            writer.wait_acked(before + 200, timeout=60)  # the producer carries on
        read_to_end(broker.bootstrap, topic_name, history)
    report = history.check()
    report.assert_ok()
    assert report.acknowledged >= 400 and report.distinct_read >= report.acknowledged
