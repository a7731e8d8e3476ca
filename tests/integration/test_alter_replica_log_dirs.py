"""A broker with two ``log.dirs``: partitions spread over both, DescribeLogDirs lists both,
AlterReplicaLogDirs moves a partition while a producer keeps writing to it, and every
acknowledged message is read exactly once, in order, from the new directory, also after a
clean restart and after kill -9."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from kio.index import load_payload_module
from kio.static.constants import EntityType

from strom.protocol.messages import build
from strom.testing import BrokerProcess
from strom.testing.raw import RawConnection
from tests.integration.clients import consume_all, create_topic

TOPIC = "moving"


def describe(bootstrap: str) -> dict[str, dict[tuple[str, int, bool], int]]:
    """log dir -> {(topic, partition, is_future): size}"""
    with RawConnection(bootstrap) as conn:
        resp = conn.request(35, 4, topics=None)
    return {r.log_dir: {(t.name, int(p.partition_index), bool(p.is_future_key)):
                        int(p.partition_size) for t in r.topics for p in t.partitions}
            for r in resp.results}  # fmt: skip


def alter(bootstrap: str, path: str, partitions: dict[str, list[int]]) -> dict[Any, int]:
    mod = load_payload_module(34, 2, EntityType.request)
    topics = tuple(build(mod.AlterReplicaLogDirTopic, name=n, partitions=tuple(p))
                   for n, p in partitions.items())  # fmt: skip
    with RawConnection(bootstrap) as conn:
        resp = conn.request(34, 2, dirs=(build(mod.AlterReplicaLogDir, path=path,
                                                     topics=topics),))  # fmt: skip
    return {(t.topic_name, int(p.partition_index)): int(p.error_code)
            for t in resp.results for p in t.partitions}  # fmt: skip


def read(bootstrap: str, n: int) -> list[bytes]:
    msgs = consume_all(bootstrap, TOPIC, [0], n, timeout=60)
    return [m.value() for m in msgs]


def test_move_a_partition_while_it_is_written(tmp_path: Path) -> None:
    a, b = (tmp_path / "a").resolve(), (tmp_path / "b").resolve()
    broker = BrokerProcess(tmp_path / "data", settings={"log.dirs": f"{a},{b}",
                                                        "log.segment.bytes": "20000"})  # fmt: skip
    broker.start()
    try:
        create_topic(broker.bootstrap, TOPIC, partitions=4)
        seen = describe(broker.bootstrap)
        assert set(seen) == {str(a), str(b)}
        assert all(len(parts) == 2 for parts in seen.values()), seen  # 4 over 2: 2 each
        source = next(d for d, parts in seen.items() if (TOPIC, 0, False) in parts)
        target = str(b) if source == str(a) else str(a)

        acked: list[bytes] = []
        stop = threading.Event()
        errors: list[Any] = []

        def write() -> None:
            producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all",
                                 "enable.idempotence": True, "linger.ms": 2})  # fmt: skip
            i = 0

            def done(err: Any, msg: Any) -> None:
                (errors.append(err) if err else acked.append(msg.value()))

            while not stop.is_set() or i < 2000:
                producer.produce(TOPIC, b"m%06d" % i + b"x" * 200, partition=0, on_delivery=done)
                producer.poll(0)
                i += 1
                if i % 200 == 0:
                    time.sleep(0.01)
            producer.flush(30)

        writer = threading.Thread(target=write)
        writer.start()
        while len(acked) < 1000:
            time.sleep(0.05)
        assert alter(broker.bootstrap, "/no/such/dir", {TOPIC: [0]}) == {(TOPIC, 0): 57}
        assert alter(broker.bootstrap, target, {TOPIC: [9]}) == {(TOPIC, 9): 9}
        assert alter(broker.bootstrap, target, {TOPIC: [0]}) == {(TOPIC, 0): 0}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            seen = describe(broker.bootstrap)
            if (TOPIC, 0, False) in seen[target] and not any(k[2] for k in seen[target]):
                break
            time.sleep(0.1)
        assert (TOPIC, 0, False) in seen[target] and (TOPIC, 0, False) not in seen[source]
        stop.set()
        writer.join(60)
        assert errors == [] and len(acked) >= 2000
        assert sorted(acked) == acked  # acknowledged in order (one partition, idempotent)
        assert read(broker.bootstrap, len(acked)) == acked
        assert list((Path(target) / f"{TOPIC}-0").glob("*.log"))
        assert not (Path(source) / f"{TOPIC}-0").exists()

        broker.stop()  # SIGTERM
        broker.start()
        assert read(broker.bootstrap, len(acked)) == acked
        broker.kill()  # kill -9
        broker.start()
        assert read(broker.bootstrap, len(acked)) == acked
        seen = describe(broker.bootstrap)
        assert (TOPIC, 0, False) in seen[target] and (TOPIC, 0, False) not in seen[source]
    finally:
        broker.stop()
