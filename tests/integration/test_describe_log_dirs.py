"""DescribeLogDirs (key 35) on the wire: one log dir (the data dir), partition sizes that are
the bytes of the partition's ``.log`` files, null = every topic, unknown topics absent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kio.index import load_payload_module
from kio.static.constants import EntityType

from strom.protocol.messages import build
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
