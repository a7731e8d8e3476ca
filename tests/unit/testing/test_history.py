"""The history checker finds each anomaly it claims to, and nothing in a clean history."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from strom.testing.history import KINDS, UNKNOWN_OFFSET, History

T = "t"


def v(n: int) -> bytes:
    return f"v{n}".encode()


def clean(n: int = 5, partition: int = 0) -> History:
    """n values written by producer p, acknowledged at offsets 0..n-1, read once each."""
    h = History()
    for i in range(n):
        h.attempt(T, None, v(i), "p")
    for i in range(n):
        h.ack(T, partition, i, None, v(i), "p")
    for i in range(n):
        h.read(T, partition, i, None, v(i), "c")
    return h


def only(report: object, kind: str) -> None:
    counts = report.counts()  # type: ignore[attr-defined]
    assert counts[kind] > 0, str(report)
    assert {k: n for k, n in counts.items() if k != kind} == dict.fromkeys(
        (k for k in KINDS if k != kind), 0
    ), str(report)


def test_clean_history_is_ok() -> None:
    report = clean().check()
    assert report.ok, str(report)
    assert (report.attempted, report.acknowledged, report.read, report.distinct_read) == (5,) * 4
    assert "anomalies: none" in str(report)
    report.assert_ok()


def test_reading_the_same_offset_twice_is_not_a_duplicate() -> None:
    h = clean()
    h.read(T, 0, 2, None, v(2), "c2")  # a consumer re-reads after a rebalance
    assert h.check().ok


def test_unacknowledged_attempt_may_or_may_not_be_read() -> None:
    h = clean()
    h.attempt(T, None, v(9), "p")
    h.fail(T, v(9), "p")  # indefinite: a timeout
    h.read(T, 0, 5, None, v(9), "c")
    assert h.check().ok
    h2 = clean()
    h2.attempt(T, None, v(9), "p")
    assert h2.check().ok  # never read: fine, never acknowledged


def test_lost() -> None:
    h = History()
    for i in range(4):
        h.attempt(T, None, v(i))
        h.ack(T, 0, i, None, v(i))
    for i in (0, 1, 3):
        h.read(T, 0, i, None, v(i))
    report = h.check()
    only(report, "lost")
    [lost] = report.lost
    assert (lost.partition, lost.offset, lost.value) == (0, 2, v(2))
    assert "reads reached offset 3" in lost.detail
    assert "LOST (1):" in str(report)
    with pytest.raises(AssertionError, match="LOST"):
        report.assert_ok()


def test_lost_when_reads_stopped_early_says_so() -> None:
    h = clean(3)
    h.attempt(T, None, v(3))
    h.ack(T, 0, 3, None, v(3))
    [lost] = h.check().lost
    assert "reads stopped at offset 2" in lost.detail


def test_duplicated_by_reads_at_two_offsets() -> None:
    h = clean(3)
    h.read(T, 0, 3, None, v(1), "c")  # v1 again, at a new offset (a retry written twice)
    report = h.check()
    only(report, "duplicated")
    assert "read at 0@1, 0@3" in report.duplicated[0].detail


def test_duplicated_by_two_acknowledgements() -> None:
    h = History()
    h.attempt(T, None, v(0))
    h.ack(T, 0, 0, None, v(0))
    h.ack(T, 0, 1, None, v(0))  # the same value acknowledged twice at different offsets
    h.read(T, 0, 0, None, v(0))
    report = h.check()
    assert report.duplicated and "acknowledged at 0@0, 0@1" in report.duplicated[0].detail
    # and the second acknowledged place was never read there: that is inconsistent too
    assert not report.lost


def test_reordered() -> None:
    h = History()
    for i in range(3):
        h.attempt(T, None, v(i))
    # acknowledged in order v0, v1, v2, but the log holds v0, v2, v1
    h.ack(T, 0, 0, None, v(0))
    h.ack(T, 0, 2, None, v(1))
    h.ack(T, 0, 1, None, v(2))
    for off, val in ((0, v(0)), (1, v(2)), (2, v(1))):
        h.read(T, 0, off, None, val)
    report = h.check()
    only(report, "reordered")
    [r] = report.reordered
    assert r.value == v(2) and "after b'v1'" in r.detail


def test_order_is_per_producer_and_partition() -> None:
    h = History()
    # two producers interleave on one partition, two partitions: all in order per stream
    h.ack(T, 0, 0, None, b"a0", "a")
    h.ack(T, 1, 0, None, b"b0", "b")
    h.ack(T, 0, 1, None, b"b1", "b")
    h.ack(T, 1, 1, None, b"a1", "a")
    h.ack(T, 0, 2, None, b"a2", "a")
    for val in (b"a0", b"b0", b"b1", b"a1", b"a2"):
        h.attempt(T, None, val)
    for p, o, val in ((0, 0, b"a0"), (0, 1, b"b1"), (0, 2, b"a2"), (1, 0, b"b0"), (1, 1, b"a1")):
        h.read(T, p, o, None, val)
    assert h.check().ok


def test_inconsistent_offsets_between_reads() -> None:
    h = clean(3)
    h.attempt(T, None, v(7))
    h.read(T, 0, 2, None, v(7), "c2")  # another consumer saw another value at offset 2
    report = h.check()
    assert report.inconsistent, str(report)
    assert {a.kind for k in KINDS for a in report.anomalies[k]} == {"inconsistent"}
    assert "different values" in report.inconsistent[0].detail


def test_inconsistent_when_read_elsewhere_than_acknowledged() -> None:
    h = History()
    h.attempt(T, None, v(0))
    h.ack(T, 0, 5, None, v(0))
    h.read(T, 0, 9, None, v(0))
    report = h.check()
    only(report, "inconsistent")
    assert "read at 0@9" in report.inconsistent[0].detail


def test_unexpected_never_written() -> None:
    h = clean(2)
    h.read(T, 0, 2, None, b"ghost", "c")
    report = h.check()
    only(report, "unexpected")
    assert "never written" in report.unexpected[0].detail


def test_unexpected_after_a_definite_failure() -> None:
    h = clean(2)
    h.attempt(T, None, v(5))
    h.fail(T, v(5), definite=True)  # e.g. NOT_ENOUGH_REPLICAS before the append
    h.read(T, 0, 2, None, v(5))
    report = h.check()
    only(report, "unexpected")
    assert "definitely failed" in report.unexpected[0].detail


def test_report_shows_at_most_ten_examples() -> None:
    h = History()
    for i in range(25):
        h.ack(T, 0, i, None, v(i))
    report = h.check()
    assert len(report.lost) == 25
    assert "... and 15 more" in str(report)


def test_implicit_acknowledgement_without_an_offset() -> None:
    """librdkafka acknowledges earlier messages implicitly (no offset) when a later batch of
    the partition is acknowledged: read once, that is fine; a real anomaly is still found."""
    h = History()
    for i in range(3):
        h.attempt(T, None, v(i))
    h.ack(T, 0, UNKNOWN_OFFSET, None, v(0))  # implicitly acknowledged
    h.ack(T, 0, 1, None, v(1))
    h.ack(T, 0, 2, None, v(2))
    for i in range(3):
        h.read(T, 0, i, None, v(i))
    assert h.check().ok, str(h.check())
    h.read(T, 0, 3, None, v(0))  # and read a second time: duplicated
    only(h.check(), "duplicated")
    unread = History()
    unread.attempt(T, None, v(0))
    unread.ack(T, 0, UNKNOWN_OFFSET, None, v(0))
    report = unread.check()
    only(report, "lost")
    assert "offset unknown" in report.lost[0].detail


def test_implicit_acknowledgement_read_out_of_order_is_reordered() -> None:
    h = History()
    for i in range(2):
        h.attempt(T, None, v(i))
    h.ack(T, 0, UNKNOWN_OFFSET, None, v(0))
    h.ack(T, 0, 0, None, v(1))
    h.read(T, 0, 0, None, v(1))
    h.read(T, 0, 1, None, v(0))  # acknowledged first, stored after
    only(h.check(), "reordered")


def _msg(topic: str, partition: int, offset: int, key: bytes | None, value: bytes) -> object:
    return SimpleNamespace(
        topic=lambda: topic, partition=lambda: partition, offset=lambda: offset,
        key=lambda: key, value=lambda: value,
    )


def test_confluent_kafka_adapters() -> None:
    h = History()
    cb = h.delivery_callback("p1")
    h.attempt(T, b"k", b"x")
    h.attempt(T, b"k", b"y")
    cb(None, _msg(T, 3, 10, b"k", b"x"))
    cb(object(), _msg(T, -1, -1, b"k", b"y"))  # an error: indefinite failure
    h.attempt(T, b"k", b"z")
    cb(None, _msg(T, 3, None, b"k", b"z"))  # implicitly acknowledged: offset() is None
    h.record_message(_msg(T, 3, 10, b"k", b"x"), "c1")
    h.record_message(_msg(T, 3, 11, b"k", b"z"), "c1")
    report = h.check()
    assert report.ok and (report.acknowledged, report.failed, report.read) == (2, 1, 2)
    assert h.acks[0].producer == "p1" and h.acks[0].key == b"k"
    assert h.acks[1].offset == UNKNOWN_OFFSET


def test_recording_from_threads() -> None:
    h = History()

    def write(name: str) -> None:
        for i in range(500):
            h.attempt(T, None, f"{name}{i}".encode(), name)

    threads = [threading.Thread(target=write, args=(n,)) for n in "abcd"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert h.check().attempted == 2000
