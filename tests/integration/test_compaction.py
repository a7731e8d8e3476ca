"""Log compaction against a real broker process, read back with confluent-kafka."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from strom.testing import BrokerProcess

from .clients import consume_all, create_topic, produce

KEYS = 20
ROUNDS = 15
TOMBSTONED = {3, 7, 11}
DELETE_RETENTION_MS = 1500


def _wait(pred, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.parametrize("idempotent", [False, True], ids=["plain", "idempotent"])
def test_compaction_keeps_latest_per_key_across_restart(
    tmp_path: Path, topic_name: str, idempotent: bool
) -> None:
    """With an idempotent producer the cleaner keeps empty batches (producer state), which
    the consumer must step over."""
    conf = {"enable.idempotence": idempotent}
    data_dir = tmp_path / "data"
    settings = {"log.cleaner.backoff.ms": "200", "log.retention.check.interval.ms": "200"}
    proc = BrokerProcess(data_dir, settings=settings)
    proc.start()
    try:
        create_topic(proc.bootstrap, topic_name, 1, {
            "cleanup.policy": "compact",
            "segment.bytes": "2000",
            "segment.ms": "300",
            "min.cleanable.dirty.ratio": "0.01",
            "delete.retention.ms": str(DELETE_RETENTION_MS),
        })  # fmt: skip
        expected: dict[bytes, bytes] = {}
        for r in range(ROUNDS):
            msgs = [{"key": b"key-%d" % k, "value": b"v-%d-%d" % (k, r)} for k in range(KEYS)]
            produce(proc.bootstrap, topic_name, msgs, **conf)
            expected.update((m["key"], m["value"]) for m in msgs)
        produce(proc.bootstrap, topic_name, [{"key": b"key-%d" % k, "value": None}
                                              for k in TOMBSTONED], **conf)  # fmt: skip
        for k in TOMBSTONED:
            del expected[b"key-%d" % k]
        total = KEYS * ROUNDS + len(TOMBSTONED)

        # first cleaning: duplicates gone (tombstones still inside delete.retention.ms)
        def cleaned() -> bool:
            msgs = consume_all(proc.bootstrap, topic_name, [0], total, timeout=2)
            return len(msgs) < total // 3

        _wait(cleaned, 30, "the cleaner to shrink the log")
        time.sleep(DELETE_RETENTION_MS / 1000 + 0.5)
        # a little more dirty data (other keys) so the cleaner runs again past the horizon
        produce(proc.bootstrap, topic_name, [{"key": b"late-%d" % i, "value": b"x"}
                                              for i in range(5)], **conf)  # fmt: skip
        expected.update((b"late-%d" % i, b"x") for i in range(5))

        def tombstones_gone() -> bool:
            msgs = consume_all(proc.bootstrap, topic_name, [0], total, timeout=2)
            keys = [m.key() for m in msgs]
            return not any(b"key-%d" % k in keys for k in TOMBSTONED) and b"late-4" in keys

        _wait(tombstones_gone, 30, "tombstones to be removed")
        proc.stop()
        proc.start()

        msgs = consume_all(proc.bootstrap, topic_name, [0], len(expected), timeout=15)
        offsets = [m.offset() for m in msgs]
        assert offsets == sorted(set(offsets)), "offsets must strictly increase"
        latest: dict[bytes, bytes | None] = {}
        for m in msgs:
            latest[m.key()] = m.value()
        assert latest == expected
        # only a few records more than one per key: what sits in the uncleaned active segment
        assert len(msgs) < len(expected) + KEYS
        # the log end offset did not move
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": proc.bootstrap, "group.id": "wm"})
        try:
            _low, high = c.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=10)
        finally:
            c.close()
        assert high == total + 5
    finally:
        proc.stop()


def test_old_tombstone_outlives_the_first_cleanings(tmp_path: Path, topic_name: str) -> None:
    """A tombstone produced with a CreateTime two days old (delete.retention.ms one minute) is
    not dropped by the cleaner that first passes it: the horizon starts then (KIP-534), so a
    consumer that is behind still reads the delete. The stored batch carries the horizon."""
    from strom.protocol import record_batch as rb

    proc = BrokerProcess(tmp_path / "data", settings={"log.cleaner.backoff.ms": "200"})
    proc.start()
    try:
        create_topic(proc.bootstrap, topic_name, 1, {
            "cleanup.policy": "compact", "segment.bytes": "2000", "segment.ms": "300",
            "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "60000",
        })  # fmt: skip
        old = int(time.time() * 1000) - 2 * 86_400_000
        produce(proc.bootstrap, topic_name, [{"key": b"doomed", "value": b"alive"}])
        produce(proc.bootstrap, topic_name, [{"key": b"doomed", "value": None, "timestamp": old}])
        for r in range(2):
            msgs = [{"key": b"key-%d" % k, "value": b"v-%d-%d" % (k, r) * 10} for k in range(KEYS)]
            produce(proc.bootstrap, topic_name, msgs)
        total = 2 + 2 * KEYS

        def cleaned_twice() -> bool:  # each cleaning rewrites; more dirty data forces another
            produce(proc.bootstrap, topic_name, [{"key": b"key-0", "value": b"again" * 20}])
            msgs = consume_all(proc.bootstrap, topic_name, [0], total, timeout=2)
            return len(msgs) < KEYS + 5

        _wait(cleaned_twice, 40, "the cleaner to compact the log")
        msgs = consume_all(proc.bootstrap, topic_name, [0], KEYS + 2, timeout=5)
        doomed = [(m.value(), m.timestamp()[1]) for m in msgs if m.key() == b"doomed"]
        assert doomed == [(None, old)]  # the delete is still there, its timestamp unchanged
        seg = proc.data_dir / f"{topic_name}-0" / f"{0:020d}.log"
        headers = [h for h, _ in rb.iter_batches(seg.read_bytes())]
        with_horizon = [h for h in headers if h.attributes & rb.DELETE_HORIZON_BIT]
        assert with_horizon and with_horizon[0].base_timestamp > old + 2 * 86_400_000
    finally:
        proc.stop()
