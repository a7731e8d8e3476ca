"""A long-polling Fetch re-reads only the partitions that changed when it wakes up.

An in-process broker (so the test can count partition reads): a Fetch over 60 caught-up
partitions waits; an append to one wakes it; the answer carries exactly that record and the
wake-up read one partition, not 60.
"""

from __future__ import annotations

import asyncio
import datetime
from pathlib import Path
from typing import Any

import pytest

from strom.broker.assembly import Broker
from strom.broker.handlers import fetch
from strom.config import BrokerConfig
from strom.protocol.messages import build, request_class
from strom.protocol.record_batch import build_batch, decode_records, iter_batches
from strom.testing.raw import RawConnection

PARTITIONS = 60


def _fetch_fields(topic: str, offsets: dict[int, int], wait_ms: int) -> dict[str, Any]:
    mod = __import__("kio.schema.fetch.v12.request", fromlist=["x"])
    parts = tuple(
        build(mod.FetchPartition, partition=p, current_leader_epoch=-1, fetch_offset=o,
              last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20)
        for p, o in offsets.items()
    )  # fmt: skip
    return dict(replica_id=-1, max_wait=datetime.timedelta(milliseconds=wait_ms), min_bytes=1,
                max_bytes=50 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                rack_id="", forgotten_topics_data=(), cluster_id=None,
                topics=(build(mod.FetchTopic, topic=topic, partitions=parts),))  # fmt: skip


@pytest.mark.parametrize("sendfile", ["true", "false"])
def test_wakeup_rereads_only_the_changed_partition(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   sendfile: str) -> None:  # fmt: skip
    reads: list[tuple[str, int]] = []
    real = fetch._FetchPlan._read_partition

    def counting(self: fetch._FetchPlan, topic: str, p: Any, total: int) -> Any:
        reads.append((topic, p.partition))
        return real(self, topic, p, total)

    monkeypatch.setattr(fetch._FetchPlan, "_read_partition", counting)
    assert request_class(1, 12) is not None

    async def main() -> None:
        config = BrokerConfig.load(None, [f"strom.fetch.sendfile.enable={sendfile}",
                                          "offsets.topic.num.partitions=1",
                                          "strom.admin.listener="])  # fmt: skip
        broker = Broker(config, tmp_path / "data", ("127.0.0.1", 0))
        await broker.start()
        try:
            assert broker._server is not None
            port = broker._server.sockets[0].getsockname()[1]
            services = broker.services
            assert services is not None
            await services.topics.create("w", PARTITIONS, 1, {})
            services.replicas.append("w", 3, build_batch([(b"k", b"old", [], 1)]))
            offsets = {p: (1 if p == 3 else 0) for p in range(PARTITIONS)}  # all caught up

            def long_poll() -> Any:
                with RawConnection(f"127.0.0.1:{port}", timeout=30) as conn:
                    return conn.request(1, 12, **_fetch_fields("w", offsets, 20_000))

            reads.clear()
            pending = asyncio.ensure_future(asyncio.to_thread(long_poll))
            deadline = asyncio.get_running_loop().time() + 20
            while len(reads) < PARTITIONS:  # the first full read, then it waits
                assert asyncio.get_running_loop().time() < deadline and not pending.done()
                await asyncio.sleep(0.01)
            assert not pending.done()
            services.replicas.append("w", 42, build_batch([(b"k", b"new", [], 2)]))
            response = await asyncio.wait_for(pending, 20)
        finally:
            await broker.stop()
        assert reads[:PARTITIONS] == [("w", p) for p in range(PARTITIONS)]
        assert reads[PARTITIONS:] == [("w", 42)]  # the wake-up read one partition
        parts = {int(p.partition_index): p for p in response.responses[0].partitions}
        assert sorted(parts) == list(range(PARTITIONS))
        got = {i: [r.value for _h, b in iter_batches(bytes(p.records or b"")) for r in decode_records(b)]
               for i, p in parts.items()}  # fmt: skip
        assert got[42] == [b"new"]
        assert all(v == [] for i, v in got.items() if i != 42)
        assert int(parts[3].high_watermark) == 1 and int(parts[42].high_watermark) == 1
        assert all(int(p.error_code) == 0 for p in parts.values())

    asyncio.run(main())
