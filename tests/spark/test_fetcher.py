"""The executors' batch reader without Spark: raw Fetch + the native codec + Arrow, against a
real broker, compared with what confluent-kafka consumes from the same partition."""

from __future__ import annotations

import uuid
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Producer

from strom.protocol import records
from strom.spark.fetcher import RangePartition, read_range
from strom.spark.options import parse_read_options
from strom.spark.schema import arrow_schema
from strom.testing import BrokerProcess

from .helpers import consume_all, create_topic, produce

pytestmark = pytest.mark.usefixtures("codec")


@pytest.fixture(params=["native", "python"])
def codec(request: pytest.FixtureRequest) -> Any:
    before = records.IMPLEMENTATION
    records.use(request.param)
    yield request.param
    records.use(before)


def _rows(bootstrap: str, topic: str, start: int, end: int, headers: bool = True,
          **options: str) -> list[dict[str, Any]]:  # fmt: skip
    opts = parse_read_options({"kafka.bootstrap.servers": bootstrap, "subscribe": topic,
                               "includeHeaders": str(headers).lower(), **options},
                              streaming=False)  # fmt: skip
    schema = arrow_schema(headers)
    batches = list(read_range(opts, RangePartition(topic, 0, start, end), schema))
    for b in batches:
        assert b.schema == schema
        b.validate(full=True)
    return pa.Table.from_batches(batches, schema=schema).to_pylist() if batches else []


def _expected(msgs: list[Any], start: int, end: int) -> list[tuple[Any, ...]]:
    return [(m.offset(), m.key(), m.value(), m.timestamp()[1], m.headers() or None)
            for m in msgs if start <= m.offset() < end]  # fmt: skip


def _got(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    out = []
    for r in rows:
        ms = int(r["timestamp"].timestamp() * 1000)
        hdrs = [(h["key"], h["value"]) for h in r["headers"]] if r["headers"] is not None else None
        out.append((r["offset"], r["key"], r["value"], ms, hdrs))
    return out


@pytest.mark.parametrize("codec_name", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_ranges_of_compressed_batches(spark_broker: BrokerProcess, codec_name: str) -> None:
    topic = f"fetcher-{codec_name}-{uuid.uuid4().hex[:6]}"
    create_topic(spark_broker.bootstrap, topic, 1)
    msgs_in = []
    for i in range(500):
        m: dict[str, Any] = {"key": None if i % 7 == 0 else b"k%d" % i, "value": b"v" * (i % 50)}
        if i % 5 == 0:
            m["headers"] = [("h", b"%d" % i), ("null", None), ("é", b"")]
        if i % 11 == 0:
            m["value"] = None
        msgs_in.append(m)
    produce(spark_broker.bootstrap, topic, msgs_in, **{"compression.type": codec_name,
                                                       "batch.num.messages": 37})  # fmt: skip
    msgs = consume_all(spark_broker.bootstrap, topic, [0])
    assert len(msgs) == 500
    for start, end in ((0, 500), (3, 41), (36, 38), (499, 500), (0, 1)):
        assert _got(_rows(spark_broker.bootstrap, topic, start, end)) == _expected(msgs, start, end)
    rows = _rows(spark_broker.bootstrap, topic, 10, 20, headers=False)
    assert [r["offset"] for r in rows] == list(range(10, 20))
    assert {r["topic"] for r in rows} == {topic} and {r["partition"] for r in rows} == {0}
    assert {r["timestampType"] for r in rows} == {0}


def test_read_committed_skips_aborted_and_markers(spark_broker: BrokerProcess) -> None:
    topic = f"fetcher-txn-{uuid.uuid4().hex[:6]}"
    create_topic(spark_broker.bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": spark_broker.bootstrap,
                         "transactional.id": f"tx-{topic}", "linger.ms": 5})  # fmt: skip
    producer.init_transactions(30)
    plain = Producer({"bootstrap.servers": spark_broker.bootstrap})
    for round_ in range(4):
        producer.begin_transaction()
        for i in range(10):
            producer.produce(topic, value=b"t%d-%d" % (round_, i), partition=0)
        producer.flush(30)
        plain.produce(topic, value=b"plain-%d" % round_, partition=0)  # between, not in it
        plain.flush(30)
        if round_ % 2:
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
    committed = consume_all(spark_broker.bootstrap, topic, [0], **{"isolation.level": "read_committed"})
    every = consume_all(spark_broker.bootstrap, topic, [0],
                        **{"isolation.level": "read_uncommitted"})  # fmt: skip
    end = every[-1].offset() + 2  # the last marker
    got = _rows(spark_broker.bootstrap, topic, 0, end, **{"isolation.level": "read_committed"})
    assert [(r["offset"], r["value"]) for r in got] == [(m.offset(), m.value()) for m in committed]
    assert len(got) == 24  # 2 committed transactions of 10, 4 plain records
    got = _rows(spark_broker.bootstrap, topic, 0, end)
    assert [(r["offset"], r["value"]) for r in got] == [(m.offset(), m.value()) for m in every]
    assert len(got) == 44  # markers are never rows
    # ranges that start and end between and on markers
    for start, stop in ((5, 12), (10, 11), (11, 23), (22, 40)):
        part = _rows(spark_broker.bootstrap, topic, start, stop, **{"isolation.level": "read_committed"})
        assert [r["offset"] for r in part] == [m.offset() for m in committed
                                               if start <= m.offset() < stop]  # fmt: skip


def test_sasl_the_executors_cannot_do_is_refused_in_one_line(spark_broker: BrokerProcess) -> None:
    for protocol in ("SASL_SSL", "SASL_PLAINTEXT"):
        with pytest.raises(ValueError, match="sasl.mechanism=GSSAPI"):  # librdkafka's default
            _rows(spark_broker.bootstrap, "any", 0, 1, **{"kafka.security.protocol": protocol})
    with pytest.raises(ValueError, match="needs sasl.username"):
        _rows(spark_broker.bootstrap, "any", 0, 1, **{"kafka.security.protocol": "SASL_PLAINTEXT",
                                                      "kafka.sasl.mechanism": "PLAIN"})
