"""Incremental fetch sessions (KIP-227) on the wire, and a client that uses them."""

from __future__ import annotations

from typing import Any

from strom.admin import wire
from strom.testing.raw import RawConnection
from tests.integration.clients import create_topic, produce
from tests.integration.routing import leader_of

FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH = 70, 71


def _fetch(conn: RawConnection, topic: str, session_id: int, epoch: int,
           partitions: dict[int, int], forgotten: tuple[int, ...] = ()) -> Any:  # fmt: skip
    """Fetch v12 of ``partitions`` (partition -> fetch offset) without waiting."""
    topics = (wire.part(1, 12, "FetchTopic", topic=topic, partitions=tuple(
        wire.part(1, 12, "FetchPartition", partition=p, fetch_offset=o, partition_max_bytes=1 << 20)
        for p, o in partitions.items())),) if partitions else ()  # fmt: skip
    gone = (wire.part(1, 12, "ForgottenTopic", topic=topic, partitions=forgotten),) if forgotten \
        else ()  # fmt: skip
    return conn.request(1, 12, replica_id=-1, max_wait=0, min_bytes=0, max_bytes=1 << 20,
                        isolation_level=0, session_id=session_id, session_epoch=epoch,
                        topics=topics, forgotten_topics_data=gone, rack_id="")  # fmt: skip


def _seen(response: Any) -> dict[int, tuple[int, bool]]:
    """partition -> (high watermark, has records) of the partitions in the response."""
    return {int(p.partition_index): (int(p.high_watermark), bool(p.records))
            for t in response.responses for p in t.partitions}  # fmt: skip


def _send(bootstrap: str, topic: str, partition: int, n: int) -> None:
    produce(bootstrap, topic, [{"value": b"v%d" % i, "partition": partition} for i in range(n)])


def test_incremental_fetch_sends_only_news(broker: Any, topic_name: str) -> None:
    create_topic(broker.bootstrap, topic_name, partitions=3, one_leader=True)
    _send(broker.bootstrap, topic_name, 0, 4)
    with RawConnection(leader_of(broker.bootstrap, topic_name)) as conn:
        full = _fetch(conn, topic_name, 0, 0, {0: 0, 1: 0, 2: 0})
        session = int(full.session_id)
        assert int(full.error_code) == 0 and session != 0
        assert _seen(full) == {0: (4, True), 1: (0, False), 2: (0, False)}
        # the client moved partition 0 to its end: nothing is new anywhere
        quiet = _fetch(conn, topic_name, session, 1, {0: 4})
        assert int(quiet.session_id) == session and _seen(quiet) == {}
        # records on partition 1: only it comes back (its fetch offset 0 is remembered)
        _send(broker.bootstrap, topic_name, 1, 2)
        news = _fetch(conn, topic_name, session, 2, {})
        assert _seen(news) == {1: (2, True)}
        # an old epoch, an unknown session
        assert int(_fetch(conn, topic_name, session, 2, {}).error_code) == INVALID_FETCH_SESSION_EPOCH
        unknown = _fetch(conn, topic_name, session ^ 0x55AA, 1, {})
        assert int(unknown.error_code) == FETCH_SESSION_ID_NOT_FOUND
        # forgotten partitions are no longer fetched
        assert _seen(_fetch(conn, topic_name, session, 3, {1: 2}, forgotten=(2,))) == {}
        _send(broker.bootstrap, topic_name, 2, 1)
        _send(broker.bootstrap, topic_name, 1, 1)
        assert _seen(_fetch(conn, topic_name, session, 4, {})) == {1: (3, True)}
        # closing: a full fetch without a session
        closed = _fetch(conn, topic_name, session, -1, {2: 0})
        assert int(closed.session_id) == 0 and _seen(closed) == {2: (1, True)}
        assert int(_fetch(conn, topic_name, session, 5, {}).error_code) == FETCH_SESSION_ID_NOT_FOUND


def test_kafka_python_consumes_through_a_fetch_session(broker: Any, topic_name: str) -> None:
    from kafka import KafkaConsumer, TopicPartition

    create_topic(broker.bootstrap, topic_name, partitions=4)
    for p in range(4):
        _send(broker.bootstrap, topic_name, p, 5)
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None,
                             auto_offset_reset="earliest", consumer_timeout_ms=10_000)  # fmt: skip
    try:
        consumer.assign([TopicPartition(topic_name, p) for p in range(4)])
        got: dict[int, list[bytes]] = {}
        for msg in consumer:
            got.setdefault(msg.partition, []).append(msg.value)
            if sum(map(len, got.values())) == 20:
                break
        for p in range(4):  # more records after the session is established
            _send(broker.bootstrap, topic_name, p, 1)
        for msg in consumer:
            got[msg.partition].append(msg.value)
            if sum(map(len, got.values())) == 24:
                break
    finally:
        consumer.close()
    assert got == {p: [b"v%d" % i for i in range(5)] + [b"v0"] for p in range(4)}
