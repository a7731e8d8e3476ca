"""Broker CPU per single-message Produce request, in process: the Python part of the cost.

Starts a :class:`strom.broker.assembly.Broker` in this process (temporary data directory, a
free 127.0.0.1 port nobody connects to), creates a topic, and feeds one connection object
(:class:`strom.broker.server.KafkaConnection`, with a transport that only counts bytes)
``--requests`` Produce frames of one 100-byte record each, as librdkafka sends them with
``linger.ms=0`` (Produce v9, acks=1, no idempotence), in bursts of ``--burst`` pipelined
frames (what arrives in one ``recv`` when several producers saturate the broker). The figure
is the process CPU time (``time.process_time``) per request from the first frame to the last
response written: framing, the pre-decode walk, ``kio``'s decode, the handler, the append
(``pwrite`` into the page cache), the response encoding. What it leaves out is the socket
(``recv``/``send``/``epoll``), which ``benchmarks/scale.py`` includes.

Run it against two trees in the same session and compare the ratio::

    PYTHONPATH=/work/main/src python benchmarks/produce_cpu.py
    PYTHONPATH=src python benchmarks/produce_cpu.py [--profile out.pstats] [--quota]

Prints one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import logging
import shutil
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any


class CountingTransport(asyncio.Transport):
    """Swallows what the connection writes; counts it."""

    def __init__(self) -> None:
        super().__init__()
        self.written = 0
        self.writes = 0
        self.answered = 0  # whole response frames written
        self._head = b""  # a size prefix split across writes
        self._left = 0  # bytes of the current frame not yet written
        self.closing = False

    def write(self, data: Any) -> None:
        self.written += len(data)
        self.writes += 1
        view = memoryview(data)
        pos = 0
        while pos < len(view):
            if self._left:
                take = min(self._left, len(view) - pos)
                self._left -= take
                pos += take
                if not self._left:
                    self.answered += 1
                continue
            need = 4 - len(self._head)
            self._head += bytes(view[pos : pos + need])
            pos += need
            if len(self._head) == 4:
                self._left = int.from_bytes(self._head, "big")
                self._head = b""

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else default

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0


def produce_frames(topic: str, count: int, first_correlation: int, partitions: int = 1,
                   records: int = 1, value_bytes: int = 100) -> list[bytes]:  # fmt: skip
    """``count`` Produce v9 frames (size prefix included), each one batch of ``records``
    records of ``value_bytes`` (default: one 100-byte record, librdkafka at linger 0); frame
    *i* to partition ``(first_correlation + i) % partitions`` (librdkafka sends one request
    per partition when each message goes to the next)."""
    import kio.schema.produce.v9.request as req

    from strom.protocol.messages import RequestHeader, build, encode_request
    from strom.protocol.record_batch import build_batch

    now = int(time.time() * 1000)
    frames = []
    for i in range(count):
        batch = build_batch([(None, b"v" * value_bytes, [], now)] * records)
        request = build(
            req.ProduceRequest, transactional_id=None, acks=1, timeout=30000,
            topic_data=(build(req.TopicProduceData, name=topic, partition_data=(
                build(req.PartitionProduceData, index=(first_correlation + i) % partitions,
                      records=batch),)),),
        )  # fmt: skip
        header = RequestHeader(0, 9, first_correlation + i, "rdkafka")
        frames.append(encode_request(header, request))
    return frames


@asynccontextmanager
async def broker_connection(
    transport: asyncio.Transport, settings: Mapping[str, str] | None = None, partitions: int = 1
) -> AsyncIterator[tuple[Any, Any]]:
    """``(broker, connection)``: a broker started in this process (temporary data directory, a
    free 127.0.0.1 port nobody connects to, ``settings`` over its defaults, the log cleaner
    and the admin listener off: its default port may be another broker's on a shared machine)
    with topic ``bench`` of ``partitions`` partitions, and one client connection object whose
    ``data_received`` takes request frames and whose responses go to ``transport``. Stopped
    and removed on exit. (``instruction_guard.py`` measures through this too: a change of the
    broker's construction is made here, once.) Trees from before the assembly (issue 19) are
    served too, so one script measures before and after."""
    from strom.broker.server import KafkaConnection
    from strom.config import BrokerConfig
    from strom.testing import free_port

    try:
        from strom.broker.assembly import Broker
    except ImportError:  # a tree from before the assembly: the broker is everything
        from strom.broker.broker import Broker  # type: ignore[import-not-found,no-redef]

    tmp = Path(tempfile.mkdtemp(prefix="strom-inprocess-"))
    config = BrokerConfig({"log.cleaner.enable": "false", "strom.admin.listener": "",
                           **(settings or {})})  # fmt: skip
    broker = Broker(config, tmp / "data", ("127.0.0.1", free_port()))
    await broker.start()
    try:
        if hasattr(broker, "create_topic"):
            await broker.create_topic("bench", partitions, 1, {})
            conn = KafkaConnection(broker)
        else:
            await broker.services.topics.create("bench", partitions, 1, {})
            conn = KafkaConnection(broker.services, broker.connections)
        conn.connection_made(transport)
        try:
            yield broker, conn
        finally:
            transport.close()
            conn.connection_lost(None)
    finally:
        await broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def bench_log(broker: Any, partition: int = 0) -> Any:
    """The log of partition ``bench-<partition>`` (see :func:`broker_connection`)."""
    replicas = broker.replicas if hasattr(broker, "create_topic") else broker.services.replicas
    return replicas.get_log("bench", partition)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    n = args.partitions
    transport = CountingTransport()
    async with broker_connection(transport, partitions=n) as (broker, conn):
        if args.quota:  # a quota no request reaches: what measuring costs (strom.broker.throttling)
            from strom.security.quotas import DEFAULT, Entity

            broker.services.quotas.quotas.update(Entity(None, DEFAULT),
                                                 {"producer_byte_rate": 1e15})  # fmt: skip
        warm = produce_frames("bench", max(2000, n), 0, n)  # at least one per partition
        await _feed(conn, warm, args.burst, transport, 0)
        sent = len(warm)
        profiler = cProfile.Profile() if args.profile else None
        gcs0 = [s["collections"] for s in gc.get_stats()]
        rounds: list[float] = []
        walls: list[float] = []
        writes0 = transport.writes
        for _ in range(args.rounds):
            frames = produce_frames("bench", args.requests, sent, n, args.records,
                                    args.value_bytes)  # fmt: skip
            if profiler is not None:
                profiler.enable()
            t0, c0 = time.perf_counter(), time.process_time()
            await _feed(conn, frames, args.burst, transport, sent)
            cpu, wall = time.process_time() - c0, time.perf_counter() - t0
            if profiler is not None:
                profiler.disable()
            sent += len(frames)
            rounds.append(cpu * 1e6 / len(frames))
            walls.append(wall * 1e6 / len(frames))
        if profiler is not None:
            profiler.dump_stats(args.profile)
        stored = sum(bench_log(broker, p).log_end_offset for p in range(n))
        if stored != len(warm) + (sent - len(warm)) * args.records:
            raise RuntimeError(f"log end offsets sum to {stored}, expected {sent}")
        gcs = [s["collections"] for s in gc.get_stats()]
        rounds.sort()
        return {
            "requests": args.requests * args.rounds,
            "partitions": n,
            "burst": args.burst,
            "records_per_request": args.records,
            "value_bytes": args.value_bytes,
            # collections of each generation during the run (warm-up included)
            "gc_collections": [b - a for a, b in zip(gcs0, gcs, strict=True)],
            # the least loaded round: other jobs on a shared machine only ever add to it
            "cpu_us_per_request": round(rounds[0], 2),
            "cpu_us_per_request_median": round(rounds[len(rounds) // 2], 2),
            "wall_us_per_request": round(min(walls), 2),
            "writes_per_request": round((transport.writes - writes0) / (sent - len(warm)), 3),
        }


async def _feed(conn: Any, frames: list[bytes], burst: int, transport: CountingTransport,
                answered_before: int) -> None:  # fmt: skip
    """Hand ``frames`` to the connection ``burst`` at a time (one ``data_received`` each) and
    wait until every one is answered (the transport saw the response bytes)."""
    expected = answered_before + len(frames)
    for i in range(0, len(frames), burst):
        conn.data_received(b"".join(frames[i : i + burst]))
        while conn.queue or conn.out:
            await asyncio.sleep(0)
    for _ in range(1000):
        if transport.answered >= expected:
            return
        await asyncio.sleep(0)
    raise RuntimeError("responses missing")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1000, help="requests per round")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--burst", type=int, default=4, help="frames per data_received")
    parser.add_argument("--partitions", type=int, default=1,
                        help="partitions of the topic; request i goes to partition i mod N")
    parser.add_argument("--records", type=int, default=1, help="records per request's batch")
    parser.add_argument("--value-bytes", type=int, default=100, help="bytes of each value")
    parser.add_argument("--repeat", type=int, default=1, help="runs; the best is reported")
    parser.add_argument("--profile", help="write cProfile stats of the (last) run here")
    parser.add_argument("--quota", action="store_true",
                        help="a producer_byte_rate on every client id, never reached (client "
                             "quotas' cost; the default measures a broker without quotas)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    runs = [asyncio.run(run(args)) for _ in range(args.repeat)]
    best = min(runs, key=lambda r: r["cpu_us_per_request"])
    best["runs_cpu_us_per_request"] = [r["cpu_us_per_request"] for r in runs]
    import strom

    best["strom"] = str(Path(strom.__file__).parent)
    print(json.dumps(best))
    return 0


if __name__ == "__main__":
    sys.exit(main())
