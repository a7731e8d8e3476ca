"""DeleteRecords is durable: once answered, a kill -9 never brings the deleted records back
(issue 13 item 1). The new log start offset is inside the active segment, so no segment file
is removed: only the ``log-start-offset-checkpoint`` can remember it."""

from __future__ import annotations

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from strom.storage import checkpoint as ckpt
from tests.integration.clients import consume_all, create_topic, produce


def _delete(bootstrap: str, topic: str, offset: int) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.delete_records([TopicPartition(topic, 0, offset)], request_timeout=15)
    result = futures[TopicPartition(topic, 0, offset)].result(timeout=20)
    return int(result.low_watermark)


def test_delete_records_survives_kill_9(fresh_broker, topic_name) -> None:
    create_topic(fresh_broker.bootstrap, topic_name)
    sent = [{"value": f"m{i}".encode()} for i in range(20)]
    produce(fresh_broker.bootstrap, topic_name, sent)
    assert _delete(fresh_broker.bootstrap, topic_name, 12) == 12
    stored = ckpt.read_offset(
        fresh_broker.data_dir / f"{topic_name}-0" / ckpt.LOG_START_OFFSET_FILE, -1
    )
    assert stored == 12  # on disk before the answer, not at the next flush
    fresh_broker.kill()
    fresh_broker.start()
    got = consume_all(fresh_broker.bootstrap, topic_name, [0], expected=8,
                      **{"auto.offset.reset": "earliest"})
    assert [(m.offset(), m.value()) for m in got] == [
        (i, f"m{i}".encode()) for i in range(12, 20)
    ]
    admin_low = _low_watermark(fresh_broker.bootstrap, topic_name)
    assert admin_low == 12


def _low_watermark(bootstrap: str, topic: str) -> int:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "wm"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        consumer.close()
    assert high == 20
    return int(low)
