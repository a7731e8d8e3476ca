"""Fetch through the sendfile path (and the copying path, same tests): large data across
segments, concurrent consumers, and segments deleted while a response is being sent."""

from __future__ import annotations

import datetime
import hashlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient

from strom.protocol.messages import (
    RequestHeader,
    build,
    decode_response,
    encode_request,
    request_class,
)
from strom.protocol.record_batch import decode_records, iter_batches, verify_crc
from strom.testing import BrokerProcess
from strom.testing.raw import RawConnection
from tests.integration.clients import create_topic, produce
from tests.integration.sockets import wait_broker_stalled_writing

FLAG = "strom.fetch.sendfile.enable"


@pytest.fixture(scope="module", params=["true", "false"], ids=["sendfile", "copy"])
def zc_broker(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("zc") / "data", settings={FLAG: request.param})
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def _value(partition: int, seq: int, size: int) -> bytes:
    seed = hashlib.sha256(f"{partition}:{seq}".encode()).digest()
    return (seed * (size // 32 + 1))[:size]


def _consume(bootstrap: str, topic: str, partitions: int, expected: int, conf: dict[str, Any],
             out: dict[int, list[tuple[int, bytes, bytes]]]) -> None:  # fmt: skip
    try:
        _consume_into(bootstrap, topic, partitions, expected, conf, out)
    except BaseException as exc:  # reported by the test through ``out``
        out[-1] = [(-1, repr(exc).encode(), b"")]


def _consume_into(bootstrap: str, topic: str, partitions: int, expected: int, conf: dict[str, Any],
                  out: dict[int, list[tuple[int, bytes, bytes]]]) -> None:  # fmt: skip
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                         "enable.auto.commit": False, **conf})  # fmt: skip
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    deadline = time.monotonic() + 90
    got = 0
    try:
        while got < expected and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.5):
                assert msg.error() is None, msg.error()
                out.setdefault(msg.partition(), []).append((msg.offset(), msg.key(), msg.value()))
                got += 1
    finally:
        consumer.close()


def test_large_data_across_segments_with_concurrent_consumers(zc_broker: BrokerProcess, topic_name: str) -> None:
    partitions, per_partition, size = 4, 1500, 1500  # ~9 MB, several segments per partition
    create_topic(zc_broker.bootstrap, topic_name, partitions, {"segment.bytes": "300000"})
    produce(zc_broker.bootstrap, topic_name, (
        {"partition": p, "key": f"{p}:{i}".encode(), "value": _value(p, i, size)}
        for i in range(per_partition) for p in range(partitions)
    ), **{"linger.ms": 20, "batch.size": 200_000})
    confs = [  # default sizes, small per-partition fetches (many responses), one-batch fetches
        {},
        {"max.partition.fetch.bytes": 40_000, "fetch.max.bytes": 100_000, "message.max.bytes": 1000},
        {"max.partition.fetch.bytes": 1, "fetch.max.bytes": 1000, "message.max.bytes": 1000},
        {"fetch.min.bytes": 500_000, "fetch.wait.max.ms": 200},
    ]
    results: list[dict[int, list[tuple[int, bytes, bytes]]]] = [{} for _ in confs]
    threads = [
        threading.Thread(target=_consume, args=(zc_broker.bootstrap, topic_name, partitions,
                                                partitions * per_partition, conf, out))
        for conf, out in zip(confs, results, strict=True)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for out in results:
        assert -1 not in out, out.get(-1)
        assert sorted(out) == list(range(partitions))
        for p, msgs in out.items():
            assert [m[0] for m in msgs] == list(range(per_partition))
            for offset, key, value in msgs:
                assert key == f"{p}:{offset}".encode()
                assert value == _value(p, offset, size)


def _fetch_request(topic: str, max_bytes: int) -> bytes:
    mod = __import__("kio.schema.fetch.v12.request", fromlist=["x"])
    req = build(request_class(1, 12), replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1,
                max_bytes=max_bytes, isolation_level=0, session_id=0, session_epoch=-1, rack_id="",
                forgotten_topics_data=(), cluster_id=None,
                topics=(build(mod.FetchTopic, topic=topic, partitions=(
                    build(mod.FetchPartition, partition=0, current_leader_epoch=-1, fetch_offset=0,
                          last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=max_bytes),
                )),))  # fmt: skip
    return encode_request(RequestHeader(1, 12, 7, "zc-test"), req)


def _deleted_logs_open(pid: int) -> list[str]:
    out = []
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.endswith(".log (deleted)"):
            out.append(target)
    return out


def test_segment_deleted_while_a_response_is_in_flight(zc_broker: BrokerProcess, topic_name: str) -> None:
    """A 20 MB response stalls in the socket (the client does not read); meanwhile DeleteRecords
    deletes the segment it comes from. The response must still arrive whole and intact."""
    count, size = 10_000, 2000
    # file.delete.delay.ms=0: the segment is unlinked at once, so only the in-flight
    # response's duplicated fd can still be reading it
    create_topic(zc_broker.bootstrap, topic_name, 1,
                 {"segment.bytes": str(64 << 20), "file.delete.delay.ms": "0"})
    produce(zc_broker.bootstrap, topic_name,
            ({"key": str(i).encode(), "value": _value(0, i, size)} for i in range(count)),
            **{"linger.ms": 20, "batch.size": 500_000})  # fmt: skip
    with RawConnection(zc_broker.bootstrap, timeout=30) as conn:
        conn.sock.sendall(_fetch_request(topic_name, 64 << 20))
        wait_broker_stalled_writing(conn.sock)  # buffers full: the send waits for writability
        admin = AdminClient({"bootstrap.servers": zc_broker.bootstrap})
        futures = admin.delete_records([TopicPartition(topic_name, 0, -1)], request_timeout=15)
        assert futures[TopicPartition(topic_name, 0, -1)].result(20).low_watermark == count  # type: ignore[index]
        seg_dir = zc_broker.data_dir / f"{topic_name}-0"
        assert not (seg_dir / f"{0:020d}.log").exists()
        pid = zc_broker.pid
        assert pid is not None
        if zc_broker.settings.get(FLAG) == "true":
            assert any(topic_name in t for t in _deleted_logs_open(pid)), "expected a stalled send"
        correlation, response = decode_response(1, 12, conn.recv_frame())
    assert correlation == 7
    part = response.responses[0].partitions[0]
    assert int(part.error_code) == 0
    records = bytes(part.records)
    offsets = []
    for _header, view in iter_batches(records):
        assert verify_crc(view)
        for rec in decode_records(view):
            assert rec.value == _value(0, rec.offset, size)
            offsets.append(rec.offset)
    assert offsets == list(range(count))
    deadline = time.monotonic() + 5
    while any(topic_name in t for t in _deleted_logs_open(pid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(topic_name in t for t in _deleted_logs_open(pid)), "a region fd leaked"


def test_consumers_keep_reading_while_retention_deletes_segments(zc_broker: BrokerProcess, topic_name: str) -> None:
    """DeleteRecords moves the log start forward in steps while two consumers read with small
    fetches; each must see only correct records, in order, and reach the end."""
    count, size = 6000, 1000
    create_topic(zc_broker.bootstrap, topic_name, 1, {"segment.bytes": "200000"})
    produce(zc_broker.bootstrap, topic_name,
            ({"key": str(i).encode(), "value": _value(0, i, size)} for i in range(count)))
    outs: list[list[int]] = [[], []]
    errors: list[BaseException] = []
    # the only message errors allowed: the start offset moved past a consumer's position (it
    # then resets to the earliest offset and reads on)
    allowed = {KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET}
    seen: list[int] = []

    def read(out: list[int]) -> None:
        try:
            consumer = Consumer({"bootstrap.servers": zc_broker.bootstrap, "group.id": "unused",
                                 "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                 "max.partition.fetch.bytes": 20_000, "fetch.max.bytes": 20_000,
                                 "message.max.bytes": 1000})  # fmt: skip
            consumer.assign([TopicPartition(topic_name, 0, 0)])
            deadline = time.monotonic() + 60
            while (not out or out[-1] < count - 1) and time.monotonic() < deadline:
                for msg in consumer.consume(200, 0.2):
                    if msg.error() is not None:
                        seen.append(msg.error().code())
                        assert msg.error().code() in allowed, msg.error()
                        continue
                    assert msg.value() == _value(0, msg.offset(), size)
                    out.append(msg.offset())
                time.sleep(0.01)
            consumer.close()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=read, args=(out,)) for out in outs]
    for t in threads:
        t.start()
    admin = AdminClient({"bootstrap.servers": zc_broker.bootstrap})
    for cut in range(500, 4001, 500):
        tp = TopicPartition(topic_name, 0, cut)
        admin.delete_records([tp], request_timeout=15)[tp].result(20)  # type: ignore[index]
        time.sleep(0.1)
    for t in threads:
        t.join(90)
    assert not errors, errors
    assert set(seen) <= allowed, seen
    for out in outs:
        assert out and out[-1] == count - 1
        assert all(a < b for a, b in zip(out, out[1:], strict=False))
        assert out[-(count - 4000):] == list(range(4000, count))
