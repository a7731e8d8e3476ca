"""What was acknowledged survives kill -9 and restart; a clean SIGTERM shutdown too; topics
and their configs come back with the data."""

from __future__ import annotations

import os
import signal

from confluent_kafka.admin import AdminClient, ConfigResource

from strom.testing import BrokerProcess
from tests.integration.clients import consume_all, create_topic, produce


def test_acknowledged_writes_survive_kill_9(fresh_broker, topic_name) -> None:
    create_topic(fresh_broker.bootstrap, topic_name, partitions=3,
                 config={"segment.bytes": "20000", "retention.ms": "123456789"})
    sent = [{"key": f"{i}".encode(), "value": f"value-{i}".encode() * 5} for i in range(3000)]
    reports = produce(fresh_broker.bootstrap, topic_name, sent, acks="1")
    acked = {(r.partition(), r.offset()): r.value() for r in reports}
    assert len(acked) == 3000
    fresh_broker.kill()
    fresh_broker.start()
    got = consume_all(fresh_broker.bootstrap, topic_name, range(3), expected=3000)
    assert {(m.partition(), m.offset()): m.value() for m in got} == acked
    # the topic's config came back too
    admin = AdminClient({"bootstrap.servers": fresh_broker.bootstrap})
    res = ConfigResource(ConfigResource.Type.TOPIC, topic_name)
    configs = admin.describe_configs([res])[res].result(timeout=20)
    assert configs["retention.ms"].value == "123456789"
    # and the log continues at the right offsets
    more = produce(fresh_broker.bootstrap, topic_name, [{"value": b"after", "partition": 0}])
    assert more[0].offset() == max(o for p, o in acked if p == 0) + 1


def test_torn_tail_after_kill_is_truncated_to_last_valid_batch(fresh_broker, topic_name) -> None:
    create_topic(fresh_broker.bootstrap, topic_name)
    produce(fresh_broker.bootstrap, topic_name, [{"value": f"m{i}".encode()} for i in range(100)])
    fresh_broker.kill()
    seg = fresh_broker.data_dir / f"{topic_name}-0" / f"{0:020d}.log"
    with open(seg, "ab") as fh:  # a write torn by the crash: half a batch header of garbage
        fh.write(b"\x00\x00\x00\x00\x00\x00\x00\x64\x00\x00\x01\x00garbage")
    fresh_broker.start()
    got = consume_all(fresh_broker.bootstrap, topic_name, [0], expected=100)
    assert [m.value() for m in got] == [f"m{i}".encode() for i in range(100)]
    more = produce(fresh_broker.bootstrap, topic_name, [{"value": b"next"}])
    assert more[0].offset() == 100


def _loaded_lines(broker: BrokerProcess) -> list[str]:
    """The log manager's start-up summaries: 'loaded N logs in Xs (R recovered, C clean; …)'."""
    return [line for line in broker.log_tail(2000).splitlines()
            if "strom.storage.log_manager: loaded" in line]  # fmt: skip


def test_sigterm_shuts_down_cleanly_and_restarts_without_recovery(fresh_broker, topic_name) -> None:
    create_topic(fresh_broker.bootstrap, topic_name)
    produce(fresh_broker.bootstrap, topic_name, [{"value": f"m{i}".encode()} for i in range(50)])
    pid = fresh_broker.pid
    assert pid is not None
    os.kill(pid, signal.SIGTERM)
    assert fresh_broker.wait(15) == 0, fresh_broker.log_tail()
    assert "Traceback" not in fresh_broker.log_tail(200)
    assert (fresh_broker.data_dir / ".kafka_cleanshutdown").exists()
    fresh_broker.start()
    # every log was loaded as clean: none re-validated (recovery skipped) ...
    loaded = _loaded_lines(fresh_broker)
    assert loaded and "(0 recovered, " in loaded[-1], loaded
    assert "last shutdown clean" in loaded[-1], loaded
    assert not (fresh_broker.data_dir / ".kafka_cleanshutdown").exists()
    got = consume_all(fresh_broker.bootstrap, topic_name, [0], expected=50)
    assert [m.value() for m in got] == [f"m{i}".encode() for i in range(50)]
    # ... while after a kill -9 the log written since the last flush is re-validated
    fresh_broker.kill()
    fresh_broker.start()
    loaded = _loaded_lines(fresh_broker)
    assert "last shutdown not clean" in loaded[-1] and "(0 recovered" not in loaded[-1], loaded
    got = consume_all(fresh_broker.bootstrap, topic_name, [0], expected=50)
    assert [m.value() for m in got] == [f"m{i}".encode() for i in range(50)]
