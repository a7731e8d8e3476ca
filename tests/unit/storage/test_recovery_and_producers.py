"""Reopen, crash recovery, index rebuild, segment swap, idempotent producers, LogManager."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from strom.clock import FakeClock
from strom.protocol.record_batch import build_batch
from strom.storage import checkpoint
from strom.storage.errors import (
    InvalidConfigError,
    InvalidProducerEpochError,
    LogDirLockedError,
    OutOfOrderSequenceError,
)
from strom.storage.log import Log
from strom.storage.log_config import LogConfig, effective_configs, validate_topic_config
from strom.storage.log_manager import LogManager, parse_log_dir_name

from .conftest import batch, values

OpenLog = Callable[..., Log]


def expected(n: int) -> list[tuple[int, bytes | None]]:
    return [(i, b"v%d" % i) for i in range(n)]


def read_all(log: Log) -> list[tuple[int, bytes | None]]:
    out: list[tuple[int, bytes | None]] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        out += values(log.read(offset, 1 << 20).records)
        offset = out[-1][0] + 1
    return out


def crash(log: Log) -> None:
    """Simulate kill -9: close fds without the clean-shutdown path."""
    for seg in log.segments:
        seg.close()


def test_reopen_after_close(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log(segment_bytes=300)
    for i in range(10):
        log.append(batch(clock, b"v%d" % i))
    log.close()
    log = open_log(segment_bytes=300)
    assert log.log_end_offset == 10 and read_all(log) == expected(10)
    assert log.append(batch(clock, b"v10")).base_offset == 10


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_recovery_from_torn_or_corrupt_tail(
    open_log: OpenLog, clock: FakeClock, damage: str
) -> None:
    log = open_log(segment_bytes=300)
    for i in range(10):
        log.append(batch(clock, b"v%d" % i))
    crash(log)
    path = log.segments[-1].path
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        data = data[:-5]
    else:
        data[-3] ^= 0x40
    path.write_bytes(bytes(data))
    log = open_log(segment_bytes=300)
    assert log.log_end_offset == 9
    assert read_all(log) == expected(9)
    assert log.append(batch(clock, b"v9")).base_offset == 9
    assert read_all(log) == expected(10)


def test_recovery_of_garbage_tail_after_crash(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log()
    for i in range(3):
        log.append(batch(clock, b"v%d" % i))
    crash(log)
    with open(log.segments[-1].path, "ab") as f:
        f.write(os.urandom(100))
    log = open_log()
    assert read_all(log) == expected(3) and log.log_end_offset == 3


def test_missing_and_corrupt_index_rebuilt(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log(segment_bytes=400, index_interval_bytes=0)
    for i in range(12):
        log.append(batch(clock, b"v%d" % i))
    log.close()
    segs = log.segments
    segs[0].path.with_suffix(".index").unlink()
    segs[1].path.with_suffix(".timeindex").write_bytes(b"\x00" * 7)
    log = open_log(segment_bytes=400, index_interval_bytes=0)
    assert read_all(log) == expected(12)
    assert values(log.read(7, 1).records) == [(7, b"v7")]
    assert len(log.segments[0].index) > 0


def test_interrupted_swap_completed(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log(segment_bytes=100)
    for i in range(4):
        log.append(batch(clock, b"v%d" % i))
    old = log.segments[:2]
    cleaned = log.create_cleaned_segment(old[0].base_offset)
    for header, data in list(old[0].batches()) + list(old[1].batches()):
        cleaned.append(data, header)
    cleaned.on_inactive()
    cleaned.flush()
    cleaned.rename_suffix(".swap")  # crash right after the commit point
    cleaned.close()
    crash(log)
    log = open_log(segment_bytes=100)
    assert [s.base_offset for s in log.segments][:1] == [0]
    assert not list(log.dir.glob("*.swap")) and not list(log.dir.glob("*.cleaned"))
    assert read_all(log) == expected(4)


def test_replace_segments(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log(segment_bytes=100)
    for i in range(4):
        log.append(batch(clock, b"v%d" % i))
    old = log.segments[:2]
    cleaned = log.create_cleaned_segment(0)
    header, data = next(old[1].batches())  # keep only offset 1
    cleaned.append(data, header)
    log.replace_segments(old, cleaned)
    assert values(log.read(0, 1 << 20).records) == [(1, b"v1")]
    log.close()
    log = open_log(segment_bytes=100)
    assert read_all(log) == [(1, b"v1"), (2, b"v2"), (3, b"v3")]


def pbatch(clock: FakeClock, seq: int, epoch: int = 0, n: int = 1, pid: int = 42) -> bytes:
    recs = [(None, b"s%d" % (seq + i), [], clock.time_ms()) for i in range(n)]
    return build_batch(recs, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def test_idempotent_producer(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log()
    assert log.append(pbatch(clock, 0, n=2)).base_offset == 0
    assert log.append(pbatch(clock, 2)).base_offset == 2
    dup = log.append(pbatch(clock, 0, n=2))
    assert (dup.base_offset, dup.last_offset, dup.duplicate) == (0, 1, True)
    assert log.log_end_offset == 3
    with pytest.raises(OutOfOrderSequenceError):
        log.append(pbatch(clock, 5))
    assert log.append(pbatch(clock, 3, pid=99)).base_offset == 3  # unknown pid: any sequence
    assert log.append(pbatch(clock, 0, epoch=1)).base_offset == 4  # epoch bump resets
    with pytest.raises(InvalidProducerEpochError):
        log.append(pbatch(clock, 3, epoch=0))
    with pytest.raises(OutOfOrderSequenceError):
        log.append(pbatch(clock, 1, epoch=2))
    assert log.log_end_offset == 5
    log.close()
    log = open_log()  # state survives from the snapshot
    assert log.append(pbatch(clock, 0, epoch=1)).duplicate
    assert log.append(pbatch(clock, 1, epoch=1)).base_offset == 5


def test_producer_state_rebuilt_after_crash(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log(segment_bytes=150)
    for seq in range(5):
        log.append(pbatch(clock, seq))
    crash(log)
    log = open_log(segment_bytes=150)
    dup = log.append(pbatch(clock, 4))
    assert dup.duplicate and dup.base_offset == 4
    with pytest.raises(OutOfOrderSequenceError):
        log.append(pbatch(clock, 7))


def test_log_config() -> None:
    cfg = LogConfig.from_configs(
        {"retention.ms": "1000", "cleanup.policy": "compact,delete"},
        {"log.retention.hours": "1", "log.segment.bytes": "2048", "message.max.bytes": "99"},
    )
    assert (cfg.retention_ms, cfg.segment_bytes, cfg.max_message_bytes) == (1000, 2048, 99)
    assert cfg.compact and cfg.delete
    assert LogConfig.from_configs({}, {"log.retention.hours": "2"}).retention_ms == 7_200_000
    assert LogConfig.from_configs({}) == LogConfig()
    eff = effective_configs({"retention.ms": "5"}, {"log.segment.bytes": "2048"})
    assert eff["retention.ms"] == ("5", "DYNAMIC_TOPIC_CONFIG")
    assert eff["segment.bytes"] == ("2048", "STATIC_BROKER_CONFIG")
    assert eff["max.message.bytes"] == ("1048588", "DEFAULT_CONFIG")
    for name, value in [("no.such", "1"), ("retention.ms", "abc"), ("cleanup.policy", "x"),
                        ("segment.bytes", "1"), ("min.cleanable.dirty.ratio", "2")]:  # fmt: skip
        with pytest.raises(InvalidConfigError):
            validate_topic_config(name, value)
    # Kafka's own words (ConfigDef), which kafka-configs prints (tests/jvm golden)
    for name, value, words in [
        ("retention.ms", "soon", "Invalid value soon for configuration retention.ms: "
         "Not a number of type LONG"),
        ("min.cleanable.dirty.ratio", "x", "Not a number of type DOUBLE"),
        ("preallocate", "maybe", "Expected value to be either true or false"),
    ]:  # fmt: skip
        with pytest.raises(InvalidConfigError, match=words):
            validate_topic_config(name, value)


def test_log_manager(tmp_path: Path, clock: FakeClock) -> None:
    assert parse_log_dir_name("my-topic.v1-3") == ("my-topic.v1", 3)
    assert parse_log_dir_name("nodash") is None
    mgr = LogManager(tmp_path, clock, {"log.segment.bytes": "150"})
    with pytest.raises(LogDirLockedError):
        LogManager(tmp_path, clock, {})
    log = mgr.create("a-b.c", 1, {"retention.ms": "1000", "segment.ms": "1000"})
    assert log.config.segment_bytes == 150 and log.config.retention_ms == 1000
    for i in range(3):
        log.append(batch(clock, b"v%d" % i))
        log.high_watermark = log.log_end_offset
    mgr.create("other", 0, {})
    clock.advance(5000)
    mgr.maintenance()
    assert log.log_start_offset == 3  # rolled by time, then retention deleted everything older
    mgr.close_all()
    mgr = LogManager(tmp_path, clock, {"log.segment.bytes": "150"})
    mgr.load(lambda topic: {"retention.ms": "1000"} if topic == "a-b.c" else {})
    assert sorted(tp for tp, _ in mgr.logs()) == [("a-b.c", 1), ("other", 0)]
    reopened = mgr.get("a-b.c", 1)
    assert reopened is not None and reopened.log_start_offset == 3
    mgr.delete("other", 0)
    assert mgr.get("other", 0) is None and not (tmp_path / "other-0").exists()
    mgr.close_all()
    assert checkpoint.read_offset(tmp_path / "a-b.c-1" / checkpoint.LOG_START_OFFSET_FILE, 0) == 3
