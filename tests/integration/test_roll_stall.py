"""Rolling a large segment does not stall other clients (the fsync is on the flusher thread),
and what must be durable before an answer still is.

A producer fills a 400 MiB segment and crosses into the next one; the roll used to fsync the
whole segment on the event loop (0.15-0.4 s for 200-400 MiB of dirty pages on the loaded
development machine, seconds on a slow disk), holding every connection. Meanwhile a second
client sends ApiVersions requests back to back and records each round trip: none may take
longer than :data:`BOUND_S` (the same test against the previous code: 0.26 s), and the roll's
fsync must have happened (the recovery point moves past the old segment).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from strom.storage import checkpoint as ckpt
from strom.testing import BrokerProcess
from strom.testing.raw import RawConnection
from tests.integration.clients import create_topic, produce

SEGMENT = 400 << 20
VALUE = 950_000
BOUND_S = 0.15


@pytest.mark.slow
@pytest.mark.serial  # request latencies measured while 400 MiB are written and fsynced
def test_roll_of_a_large_segment_does_not_delay_another_client(tmp_path: Path, topic_name: str) -> None:
    proc = BrokerProcess(tmp_path / "data")
    proc.start()
    try:
        create_topic(proc.bootstrap, topic_name, 1, {"segment.bytes": str(SEGMENT)})
        count = SEGMENT // (VALUE + 1000) - 1  # fits in the first segment
        latencies: list[tuple[float, float]] = []
        stop = threading.Event()
        errors: list[BaseException] = []

        def probe() -> None:
            try:
                with RawConnection(proc.bootstrap, timeout=30) as conn:
                    while not stop.is_set():
                        t0 = time.perf_counter()
                        response = conn.request(18, 0)
                        latencies.append((t0, time.perf_counter() - t0))
                        assert int(response.error_code) == 0
                        time.sleep(0.002)
            except BaseException as exc:  # reported below
                errors.append(exc)

        prober = threading.Thread(target=probe)
        prober.start()
        value = bytes(range(256)) * (VALUE // 256 + 1)
        conf = {"linger.ms": 0, "acks": 1, "max.in.flight.requests.per.connection": 1}
        seg_dir = proc.data_dir / f"{topic_name}-0"
        try:
            # fill the segment to just below segment.bytes (all of it dirty in the page cache)
            produce(proc.bootstrap, topic_name,
                    ({"key": str(i).encode(), "value": value[:VALUE]} for i in range(count)),
                    **conf)  # fmt: skip
            assert len(list(seg_dir.glob("*.log"))) == 1
            time.sleep(0.5)
            # then appends one at a time until one rolls it, measured by the other client alone
            probes_before = len(latencies)
            sent = count
            while len(list(seg_dir.glob("*.log"))) == 1 and sent < count + 10:
                produce(proc.bootstrap, topic_name,
                        [{"key": str(sent).encode(), "value": value[:VALUE]}], **conf)  # fmt: skip
                sent += 1
            deadline = time.monotonic() + 30
            # the roll's fsync ran on the flusher: the recovery point moved past the old segment
            while ckpt.read_offset(seg_dir / ckpt.RECOVERY_POINT_FILE, 0) == 0:
                assert time.monotonic() < deadline, "the rolled segment was never flushed"
                time.sleep(0.01)
            time.sleep(0.3)  # keep probing a moment after the flush
        finally:
            stop.set()
            prober.join(30)
        assert not errors, errors
        logs = sorted(p.name for p in seg_dir.glob("*.log"))
        assert len(logs) == 2, logs
        rolled_at = int(logs[1].split(".")[0])
        assert ckpt.read_offset(seg_dir / ckpt.RECOVERY_POINT_FILE, 0) == rolled_at
        during = latencies[probes_before:]
        assert len(during) > 20
        worst = max(lat for _t, lat in during)
        assert worst < BOUND_S, f"a request waited {worst * 1000:.0f} ms during the roll"
        # and nothing was lost: every message is there, the last one in the new segment
        consumer = Consumer({"bootstrap.servers": proc.bootstrap, "group.id": "unused",
                             "enable.auto.commit": False})  # fmt: skip
        try:
            assert consumer.get_watermark_offsets(TopicPartition(topic_name, 0), 10) == (0, sent)
            consumer.assign([TopicPartition(topic_name, 0, rolled_at - 1)])
            got = []
            deadline = time.monotonic() + 30
            while len(got) < sent - rolled_at + 1 and time.monotonic() < deadline:
                for msg in consumer.consume(10, 0.5):
                    assert msg.error() is None, msg.error()
                    got.append((msg.offset(), msg.key(), msg.value() == value[:VALUE]))
        finally:
            consumer.close()
        assert got == [(o, str(o).encode(), True) for o in range(rolled_at - 1, sent)]
    finally:
        proc.stop()


def test_flush_messages_is_durable_before_the_ack(fresh_broker: BrokerProcess, topic_name: str) -> None:
    """flush.messages=1: the fsync runs on the flusher thread, but the Produce response still
    waits for it, so the recovery-point checkpoint covers every acknowledged offset."""
    create_topic(fresh_broker.bootstrap, topic_name, 1, {"flush.messages": "1"})
    seg_dir = fresh_broker.data_dir / f"{topic_name}-0"
    for i in range(20):
        (msg,) = produce(fresh_broker.bootstrap, topic_name, [{"value": b"v%d" % i}],
                         **{"acks": "all", "linger.ms": 0})  # fmt: skip
        assert msg.offset() == i
        assert ckpt.read_offset(seg_dir / ckpt.RECOVERY_POINT_FILE, 0) >= i + 1
    # and DeleteRecords answers once the new log start offset is on disk
    admin_tp = TopicPartition(topic_name, 0, 7)
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": fresh_broker.bootstrap})
    assert admin.delete_records([admin_tp])[admin_tp].result(20).low_watermark == 7  # type: ignore[index]
    assert ckpt.read_offset(seg_dir / ckpt.LOG_START_OFFSET_FILE, 0) == 7
