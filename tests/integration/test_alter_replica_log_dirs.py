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


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.iterdir() if f.is_file())


def test_a_move_killed_mid_copy_resumes_after_the_restart(tmp_path: Path) -> None:
    """~24 MB in one partition, the move throttled to 8 MB/s (Kafka's
    replica.alter.log.dirs.io.max.bytes.per.second) so kill -9 lands mid-copy: the future
    copy exists and is smaller than the source when the broker dies. After the restart the
    same copy is resumed (its bytes kept), the move completes, and every acknowledged record
    reads back identical, once, in order."""
    a, b = (tmp_path / "a").resolve(), (tmp_path / "b").resolve()
    broker = BrokerProcess(tmp_path / "data", settings={
        "log.dirs": f"{a},{b}", "log.segment.bytes": str(4 << 20),
        "replica.alter.log.dirs.io.max.bytes.per.second": str(8 << 20)})  # fmt: skip
    broker.start()
    try:
        create_topic(broker.bootstrap, TOPIC, partitions=1)
        source = next(Path(d) for d, parts in describe(broker.bootstrap).items()
                      if (TOPIC, 0, False) in parts)  # fmt: skip
        target = b if source == a else a
        acked: list[bytes] = []
        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all",
                             "enable.idempotence": True, "linger.ms": 5})  # fmt: skip
        for i in range(24_000):
            producer.produce(TOPIC, b"r%06d-" % i + bytes([i % 251]) * 1000, partition=0,
                             on_delivery=lambda e, m: acked.append(m.value()) if not e else None)
            producer.poll(0)
        assert producer.flush(60) == 0 and len(acked) == 24_000
        src_dir = source / f"{TOPIC}-0"
        assert alter(broker.bootstrap, str(target), {TOPIC: [0]}) == {(TOPIC, 0): 0}
        deadline = time.monotonic() + 30
        future: Path | None = None
        while time.monotonic() < deadline:
            found = list(target.glob(f"{TOPIC}-0.*-future"))
            if found and _size(found[0]) > 4 << 20:
                future = found[0]
                broker.kill()  # kill -9, mid-copy
                break
            time.sleep(0.02)
        assert future is not None, "the copy never got under way"
        copied, whole = _size(future), _size(src_dir)
        assert 4 << 20 < copied < whole, (copied, whole)  # the kill landed mid-copy

        broker.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            seen = describe(broker.bootstrap)
            if (TOPIC, 0, False) in seen[str(target)] and not any(
                    k[2] for k in seen[str(target)]):  # fmt: skip
                break
            time.sleep(0.1)
        assert (TOPIC, 0, False) in seen[str(target)]
        assert (TOPIC, 0, False) not in seen[str(source)]
        log_text = broker.log_file.read_text(errors="replace")
        kept = [int(line.split("bytes of the earlier copy kept")[0].split(":")[-1])
                for line in log_text.splitlines() if "resumed moving" in line]  # fmt: skip
        assert kept and kept[-1] >= 4 << 20, kept  # resumed from the copy, not from scratch
        assert not src_dir.exists() and not list(target.glob("*-future"))
        got = read(broker.bootstrap, len(acked))
        assert len(got) == len(acked) and got == acked  # identical, once, in order
    finally:
        broker.stop()
