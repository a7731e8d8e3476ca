"""Leader epochs are consistent on a single node (issue 13 item 6): batches, Metadata,
ListOffsets and OffsetForLeaderEpoch all say epoch 0; requests naming another current epoch
are fenced; librdkafka validates its positions with OffsetForLeaderEpoch and keeps reading."""

from __future__ import annotations

import logging
import time
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from kio.index import load_payload_module
from kio.static.constants import EntityType

from strom.protocol import record_batch as rb
from strom.protocol.errors import ErrorCode
from strom.protocol.messages import build
from strom.testing.raw import RawConnection
from tests.integration.clients import create_topic, produce
from tests.integration.routing import leader_of


def _req(api_key: int, version: int, cls: str, **fields: Any) -> Any:
    return build(getattr(load_payload_module(api_key, version, EntityType.request), cls), **fields)


def _offset_for_epoch(conn: RawConnection, topic: str, epoch: int, current: int = -1,
                      partition: int = 0) -> Any:  # fmt: skip
    p = _req(23, 4, "OffsetForLeaderPartition", partition=partition,
             current_leader_epoch=current, leader_epoch=epoch)  # fmt: skip
    t = _req(23, 4, "OffsetForLeaderTopic", topic=topic, partitions=(p,))
    resp = conn.request(23, 4, replica_id=-1, topics=(t,))
    return resp.topics[0].partitions[0]


def _list_offsets(conn: RawConnection, topic: str, ts: int, current: int) -> Any:
    p = _req(2, 7, "ListOffsetsPartition", partition_index=0, current_leader_epoch=current,
             timestamp=ts)  # fmt: skip
    t = _req(2, 7, "ListOffsetsTopic", name=topic, partitions=(p,))
    resp = conn.request(2, 7, replica_id=-1, isolation_level=0, topics=(t,))
    return resp.topics[0].partitions[0]


def test_epoch_zero_everywhere(broker, topic_name) -> None:
    create_topic(broker.bootstrap, topic_name)
    with RawConnection(leader_of(broker.bootstrap, topic_name)) as conn:
        # an empty partition: epoch 0 ends at the log end offset 0 already
        e = _offset_for_epoch(conn, topic_name, 0)
        assert (e.error_code, e.leader_epoch, e.end_offset) == (ErrorCode.none, 0, 0)
    produce(broker.bootstrap, topic_name, [{"value": b"m%d" % i} for i in range(10)])
    with RawConnection(leader_of(broker.bootstrap, topic_name)) as conn:
        meta = conn.request(3, 12, topics=(_req(3, 12, "MetadataRequestTopic", topic_id=None,
                                                     name=topic_name),),
                            allow_auto_topic_creation=False,
                            include_topic_authorized_operations=False)  # fmt: skip
        assert [p.leader_epoch for p in meta.topics[0].partitions] == [0]
        for ts, offset in ((-1, 10), (-2, 0)):
            part = _list_offsets(conn, topic_name, ts, current=0)
            assert (part.error_code, part.offset, part.leader_epoch) == (ErrorCode.none, offset, 0)
        part = _list_offsets(conn, topic_name, -1, current=3)
        assert part.error_code == ErrorCode.unknown_leader_epoch
        e = _offset_for_epoch(conn, topic_name, 0, current=0)
        assert (e.error_code, e.leader_epoch, e.end_offset) == (ErrorCode.none, 0, 10)
        e = _offset_for_epoch(conn, topic_name, 4)
        assert (e.error_code, e.leader_epoch, e.end_offset) == (ErrorCode.none, -1, -1)
        e = _offset_for_epoch(conn, topic_name, 0, current=2)
        assert e.error_code == ErrorCode.unknown_leader_epoch
        e = _offset_for_epoch(conn, topic_name, 0, current=-2)
        assert e.error_code == ErrorCode.fenced_leader_epoch
        e = _offset_for_epoch(conn, topic_name, 0, partition=7)
        assert e.error_code == ErrorCode.unknown_topic_or_partition
        # a Fetch naming another current epoch is refused, with -1 it is served
        for current, code in ((1, ErrorCode.unknown_leader_epoch), (-1, ErrorCode.none)):
            fp = _req(1, 12, "FetchPartition", partition=0, current_leader_epoch=current,
                      fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1,
                      partition_max_bytes=1 << 20)  # fmt: skip
            ft = _req(1, 12, "FetchTopic", topic=topic_name, partitions=(fp,))
            resp = conn.request(1, 12, replica_id=-1, max_wait=0, min_bytes=0, max_bytes=1 << 20,
                                isolation_level=0, session_id=0, session_epoch=-1,
                                topics=(ft,), forgotten_topics_data=(), rack_id="")  # fmt: skip
            part = resp.responses[0].partitions[0]
            assert part.error_code == code
            if code == ErrorCode.none:
                headers = [h for h, _ in rb.iter_batches(part.records)]
                assert headers and all(h.partition_leader_epoch == 0 for h in headers)


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_librdkafka_validates_positions_with_offset_for_leader_epoch(broker, topic_name) -> None:
    create_topic(broker.bootstrap, topic_name)
    produce(broker.bootstrap, topic_name, [{"value": b"m%d" % i} for i in range(20)])
    handler = _Lines()
    logger = logging.getLogger(f"rdkafka-{topic_name}")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": topic_name,
                         "enable.auto.commit": False, "auto.offset.reset": "error",
                         "debug": "all"}, logger=logger)  # fmt: skip
    got: list[Any] = []
    try:
        consumer.assign([TopicPartition(topic_name, 0, 0)])
        deadline = time.monotonic() + 20
        while len(got) < 5 and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None:
                assert msg.error() is None, msg.error()
                got.append(msg)
        assert [m.leader_epoch() for m in got[:5]] == [0] * 5
        # a seek that names the epoch the client saw: librdkafka validates it with the broker
        consumer.seek(TopicPartition(topic_name, 0, 12, leader_epoch=0))
        after: list[Any] = []
        deadline = time.monotonic() + 20
        while len(after) < 8 and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None:
                assert msg.error() is None, msg.error()
                after.append(msg)
    finally:
        consumer.close()
        logger.removeHandler(handler)
    assert [(m.offset(), m.value()) for m in after] == [(i, b"m%d" % i) for i in range(12, 20)]
    # librdkafka asked OffsetForLeaderEpoch (epoch 0) and accepted the answer: end offset 20
    validated = [line for line in handler.lines if "epoch validation succeeded" in line]
    assert validated and "broker end offset 20 (offset leader epoch 0)" in validated[-1]
    assert not [line for line in handler.lines if "LOG_TRUNCATION" in line]
