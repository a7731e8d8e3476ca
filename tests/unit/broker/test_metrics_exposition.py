"""The hand-written exposition text reads back through prometheus-client's parser exactly, and
the hot-path counters add up as documented."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from strom.broker.observability.exposition import Writer, labels
from strom.broker.observability.metrics import REQUEST_BUCKETS_MS, BrokerMetrics


def _parse(text: str) -> dict[str, tuple[str, list[tuple[str, dict[str, str], float]]]]:
    return {f.name: (f.type, [(s.name, s.labels, s.value) for s in f.samples])
            for f in text_string_to_metric_families(text)}  # fmt: skip


def test_families_of_every_kind_parse_back() -> None:
    out = Writer()
    sample = out.family("strom_test_bytes", "counter", "a counter\nwith a newline")
    out.sample(sample, 3)
    out.sample(sample, 7, labels(topic="t.1", partition=0))
    tricky = 'group "a"\\b\nc'
    out.series("strom_test_lag", "gauge", "lag", [(labels(consumergroup=tricky), 2.5)])
    out.family("strom_test_ms", "histogram", "times")
    out.histogram("strom_test_ms", 'request="Produce"', (1, 10), [2, 0, 1], 42.5)
    out.family("strom_test_split", "summary", "split")
    out.summary("strom_test_split", "", 4, 0.25)
    out.single("strom_test_up", "gauge", "one", float("inf"))
    parsed = _parse(out.text())
    assert parsed["strom_test_bytes"] == ("counter", [
        ("strom_test_bytes_total", {}, 3.0),
        ("strom_test_bytes_total", {"topic": "t.1", "partition": "0"}, 7.0),
    ])  # fmt: skip
    assert parsed["strom_test_lag"] == ("gauge", [("strom_test_lag", {"consumergroup": tricky}, 2.5)])
    kind, samples = parsed["strom_test_ms"]
    assert kind == "histogram"
    assert [(n, lb.get("le"), v) for n, lb, v in samples] == [
        ("strom_test_ms_bucket", "1.0", 2.0), ("strom_test_ms_bucket", "10.0", 2.0),
        ("strom_test_ms_bucket", "+Inf", 3.0), ("strom_test_ms_count", None, 3.0),
        ("strom_test_ms_sum", None, 42.5),
    ]  # fmt: skip
    assert all(lb.get("request") == "Produce" for _n, lb, _v in samples)
    assert parsed["strom_test_split"] == ("summary", [("strom_test_split_count", {}, 4.0),
                                                      ("strom_test_split_sum", {}, 0.25)])
    assert parsed["strom_test_up"] == ("gauge", [("strom_test_up", {}, float("inf"))])


def test_request_counters_split_and_bucket() -> None:
    metrics = BrokerMetrics()
    metrics.request_done(0, 0.0, 0.002, 0.004, 0.0)  # 2 ms queued, 2 ms local
    metrics.request_done(1, 20.0, 20.0, 20.600, 0.5)  # a long poll: 500 ms remote
    produce, fetch = metrics.requests[0], metrics.requests[1]
    assert produce.count == 1 and round(produce.total_s, 6) == 0.004
    assert round(produce.queue_s, 6) == 0.002 and round(produce.local_s, 6) == 0.002
    assert produce.buckets[REQUEST_BUCKETS_MS.index(5)] == 1  # 4 ms lands in le="5"
    assert sum(produce.buckets) == 1
    assert round(fetch.remote_s, 6) == 0.5 and round(fetch.local_s, 6) == 0.1
    assert fetch.buckets[REQUEST_BUCKETS_MS.index(1000)] == 1
    metrics.request_error(1, 0)  # NONE is not an error
    metrics.request_error(1, 3)
    metrics.request_error(1, 3)
    assert fetch.errors == {3: 2}


def test_deleted_topics_keep_counting_in_the_totals() -> None:
    metrics = BrokerMetrics()
    metrics.topic("a").messages_in += 5
    metrics.topic("b").messages_in += 7
    metrics.retire_topics(lambda name: name == "b")
    assert set(metrics.topics) == {"b"}
    assert metrics.totals().messages_in == 12
    metrics.topic("a").messages_in += 1  # recreated under the same name: counts from 0
    assert metrics.topics["a"].messages_in == 1 and metrics.totals().messages_in == 13
