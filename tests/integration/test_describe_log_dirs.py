"""DescribeLogDirs (key 35) on the wire: one log dir (the data dir), partition sizes that are
the bytes of the partition's ``.log`` files, null = every topic, unknown topics absent."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from kio.index import load_payload_module
from kio.static.constants import EntityType

from strom.protocol.messages import build
from strom.testing import BrokerProcess
from strom.testing.raw import RawConnection
from tests.integration.clients import create_topic, produce
from tests.integration.routing import any_broker, process_at
from tests.topology import ExternalBroker

KEY = 35


def describe(bootstrap: str, version: int, topics: dict[str, list[int]] | None) -> Any:
    cls = load_payload_module(KEY, version, EntityType.request).DescribableLogDirTopic
    wanted = None if topics is None else tuple(
        build(cls, topic=name, partitions=tuple(parts)) for name, parts in topics.items())
    with RawConnection(any_broker(bootstrap)) as conn:  # that broker's log dirs
        return conn.request(KEY, version, topics=wanted)


def sizes(resp: Any) -> dict[tuple[str, int], int]:
    assert len(resp.results) == 1
    return {(t.name, int(p.partition_index)): int(p.partition_size)
            for t in resp.results[0].topics for p in t.partitions}  # fmt: skip


def on_disk(data_dir: Path, topic: str, partition: int) -> int:
    return sum(f.stat().st_size for f in (data_dir / f"{topic}-{partition}").glob("*.log"))


@pytest.fixture
def data_dir(broker: Any) -> Path:
    """The data dir of the broker :func:`describe` asks (a cluster's first: with the default
    replication factor it holds a replica of every test partition)."""
    if isinstance(broker, ExternalBroker):
        pytest.skip("needs the broker's data dir (STROM_TEST_BOOTSTRAP names a broker elsewhere)")
    return Path(process_at(broker, any_broker(broker.bootstrap)).data_dir)


def test_sizes_grow_with_data_and_match_the_segments_on_disk(broker, data_dir, topic_name) -> None:
    create_topic(broker.bootstrap, topic_name, partitions=2)
    empty = sizes(describe(broker.bootstrap, 4, {topic_name: [0, 1]}))
    assert empty == {(topic_name, 0): 0, (topic_name, 1): 0}

    n, s = 20, 1000
    produce(broker.bootstrap, topic_name,
            [{"value": bytes([65 + i % 26]) * s, "partition": 0} for i in range(n)],
            **{"compression.type": "none"})  # fmt: skip
    resp = describe(broker.bootstrap, 4, {topic_name: [0, 1]})
    assert int(resp.error_code) == 0
    result = resp.results[0]
    assert int(result.error_code) == 0
    assert result.log_dir == str(data_dir.resolve())
    assert 0 < int(result.usable_bytes) <= int(result.total_bytes)
    got = sizes(resp)
    assert got[(topic_name, 0)] == on_disk(data_dir, topic_name, 0)
    assert n * s <= got[(topic_name, 0)] < n * s + n * 100  # payload plus record/batch headers
    assert got[(topic_name, 1)] == 0 == on_disk(data_dir, topic_name, 1)
    assert all(not p.is_future_key and int(p.offset_lag) == 0
               for t in result.topics for p in t.partitions)  # fmt: skip

    produce(broker.bootstrap, topic_name, [{"value": b"x" * s, "partition": 0}],
            **{"compression.type": "none"})  # fmt: skip
    grown = sizes(describe(broker.bootstrap, 4, {topic_name: [0]}))
    assert grown == {(topic_name, 0): on_disk(data_dir, topic_name, 0)}
    assert grown[(topic_name, 0)] - got[(topic_name, 0)] >= s


def test_null_lists_every_topic_and_unknown_ones_are_absent(broker, data_dir, topic_name) -> None:
    other = f"{topic_name}-b"
    create_topic(broker.bootstrap, topic_name)
    create_topic(broker.bootstrap, other, partitions=3)
    produce(broker.bootstrap, other, [{"value": b"v", "partition": 2}])
    every = sizes(describe(broker.bootstrap, 1, None))
    assert {(other, 0), (other, 1), (other, 2), (topic_name, 0)} <= every.keys()
    assert every[(other, 2)] == on_disk(data_dir, other, 2) > 0
    assert {name for name, _ in every} == {
        d.name.rsplit("-", 1)[0] for d in data_dir.iterdir() if d.is_dir() and "-" in d.name
        and d.name.rsplit("-", 1)[1].isdigit()
    }  # fmt: skip

    resp = describe(broker.bootstrap, 2, {"no-such-topic": [0], other: [1, 7]})
    assert int(resp.results[0].error_code) == 0
    assert sizes(resp) == {(other, 1): 0}  # unknown topic and partition 7: simply absent


@pytest.mark.parametrize("version", [1, 2, 3, 4, 5])
def test_every_version(broker, data_dir, topic_name, version) -> None:
    create_topic(broker.bootstrap, topic_name)
    resp = describe(broker.bootstrap, version, {topic_name: [0]})
    assert sizes(resp) == {(topic_name, 0): 0}
    assert resp.results[0].log_dir == str(data_dir.resolve())
    if version >= 3:
        assert int(resp.error_code) == 0
    if version >= 4:
        assert int(resp.results[0].total_bytes) > 0
    if version >= 5:
        assert resp.results[0].is_cordoned is False


def _entries(resp: Any, topic: str) -> dict[tuple[str, bool], tuple[int, int]]:
    """(log dir, is_future) -> (partition_size, offset_lag) of partition 0 of ``topic``."""
    return {(str(r.log_dir), bool(p.is_future_key)): (int(p.partition_size), int(p.offset_lag))
            for r in resp.results for t in r.topics if t.name == topic
            for p in t.partitions if int(p.partition_index) == 0}  # fmt: skip


def test_a_move_shows_its_future_replica_also_across_a_clean_restart(tmp_path: Path) -> None:
    """Two log.dirs, a move throttled to 1 MB/s: the target dir lists the partition with
    is_future_key, the bytes copied as its size and the bytes left as offset_lag (together the
    current replica's size); SIGTERM mid-copy keeps the copy on disk, the restarted broker lists
    it again, no smaller, and completes the move; the data reads back whole."""
    from strom.admin import wire
    from tests.integration.clients import consume_all

    a, b = (tmp_path / "a").resolve(), (tmp_path / "b").resolve()
    broker = BrokerProcess(tmp_path / "data", settings={
        "log.dirs": f"{a},{b}", "replica.alter.log.dirs.io.max.bytes.per.second": str(1 << 20)})
    broker.start()
    try:
        topic = "moved"
        create_topic(broker.bootstrap, topic)
        sent = [b"%05d" % i + b"v" * 1000 for i in range(3000)]
        produce(broker.bootstrap, topic, [{"value": v, "partition": 0} for v in sent],
                **{"compression.type": "none"})  # fmt: skip
        [(source, _)] = _entries(describe(broker.bootstrap, 4, None), topic)
        target = str(b) if source == str(a) else str(a)
        part = wire.part(34, 2, "AlterReplicaLogDirTopic", name=topic, partitions=(0,))
        resp = wire.request(broker.bootstrap, 34, 2, dirs=(
            wire.part(34, 2, "AlterReplicaLogDir", path=target, topics=(part,)),))
        assert int(resp.results[0].partitions[0].error_code) == 0
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            seen = _entries(describe(broker.bootstrap, 4, None), topic)
            if seen.get((target, True), (0, 0))[0] > 0:
                break
            time.sleep(0.05)
        size = seen[(source, False)][0]
        copied, left = seen[(target, True)]
        assert 0 < copied < size and copied + left == size, seen
        assert set(seen) == {(source, False), (target, True)}

        broker.stop()  # SIGTERM mid-copy: the copy stays, to be resumed
        [future] = Path(target).glob(f"{topic}-0.*-future")
        on_disk_copy = sum(f.stat().st_size for f in future.glob("*.log"))
        assert copied <= on_disk_copy < size
        broker.start()
        seen = _entries(describe(broker.bootstrap, 4, None), topic)
        assert seen[(target, True)][0] >= on_disk_copy > 0  # resumed, not started again
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (target, False) not in seen:
            time.sleep(0.1)
            seen = _entries(describe(broker.bootstrap, 4, None), topic)
        assert seen == {(target, False): (size, 0)}
        got = [m.value() for m in consume_all(broker.bootstrap, topic, [0], len(sent))]
        assert got == sent
    finally:
        broker.stop()
