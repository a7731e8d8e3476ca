"""Fetch CPU per MiB served: broker CPU time spent answering Fetch, per MiB of record data.

Compares two source trees in the same run (``--before``, default ``/work/main/src`` or the
``STROM_BEFORE_SRC`` environment variable; ``--after``, default this checkout's ``src``), each
with ``strom.fetch.sendfile.enable`` true and false. For each: a fresh broker, ``--mib`` MiB
produced as batches of about ``--batch-kb`` KB, then ``--rounds`` full reads from offset 0 to
the end with raw Fetch v12 requests of ``--fetch-kb`` KB per request (one partition), broker
CPU (utime + stime from /proc) measured around the reads only. Prints one JSON line with
µs of broker CPU per MiB served for each case and the after/before ratios.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import cpu_seconds, remove  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def _produce(bootstrap: str, topic: str, mib: int, batch_kb: int) -> int:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50,
                         "batch.size": batch_kb * 1024, "compression.type": "none"})  # fmt: skip
    value = os.urandom(1000)
    count = mib * (1 << 20) // 1000
    for i in range(count):
        while True:
            try:
                producer.produce(topic, value=value, key=b"%d" % i)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0
    return count


def _read_all(bootstrap: str, topic: str, end: int, fetch_bytes: int) -> tuple[int, int]:
    import kio.schema.fetch.v12.request as req

    from strom.protocol.messages import build
    from strom.protocol.record_batch import iter_batches
    from strom.testing.raw import RawConnection

    offset = nbytes = requests = 0
    with RawConnection(bootstrap, timeout=60) as conn:
        while offset < end:
            resp = conn.request(
                1, 12, replica_id=-1, max_wait=datetime.timedelta(milliseconds=500), min_bytes=1,
                max_bytes=fetch_bytes, isolation_level=0, session_id=0, session_epoch=-1,
                rack_id="", forgotten_topics_data=(), cluster_id=None,
                topics=(build(req.FetchTopic, topic=topic, partitions=(
                    build(req.FetchPartition, partition=0, current_leader_epoch=-1,
                          fetch_offset=offset, last_fetched_epoch=-1, log_start_offset=-1,
                          partition_max_bytes=fetch_bytes),)),),
            )  # fmt: skip
            requests += 1
            data = bytes(resp.responses[0].partitions[0].records or b"")
            nbytes += len(data)
            for header, _ in iter_batches(data):
                offset = max(offset, header.next_offset)
    return nbytes, requests


def run_case(src: str, sendfile: str, args: argparse.Namespace) -> dict[str, object]:
    from strom.testing import BrokerProcess

    workdir = Path(tempfile.mkdtemp(prefix="strom-fetchcpu-"))
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = src  # the broker process runs this source tree
    proc = BrokerProcess(workdir / "data", settings={"strom.fetch.sendfile.enable": sendfile},
                         log_file=workdir / "broker.log")  # fmt: skip
    try:
        proc.start(timeout=30.0)
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        admin.create_topics([NewTopic("f", 1, 1, config={"segment.bytes": str(64 << 20)})])[
            "f"
        ].result(30)
        end = _produce(proc.bootstrap, "f", args.mib, args.batch_kb)
        time.sleep(0.5)
        cpu0 = cpu_seconds(proc.pid) or 0.0
        nbytes = requests = 0
        t0 = time.perf_counter()
        for _ in range(args.rounds):
            b, r = _read_all(proc.bootstrap, "f", end, args.fetch_kb * 1024)
            nbytes += b
            requests += r
        wall = time.perf_counter() - t0
        cpu = (cpu_seconds(proc.pid) or 0.0) - cpu0
        mib = nbytes / (1 << 20)
        return {"cpu_us_per_mib": round(cpu * 1e6 / mib, 1), "mib": round(mib, 1),
                "requests": requests, "cpu_s": round(cpu, 3), "wall_s": round(wall, 2)}  # fmt: skip
    finally:
        proc.stop(timeout=20.0)
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old
        remove(workdir)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default=os.environ.get("STROM_BEFORE_SRC", "/work/main/src"))
    parser.add_argument("--after", default=str(ROOT / "src"))
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--batch-kb", type=int, default=12, help="producer batch.size (KB)")
    parser.add_argument("--fetch-kb", type=int, default=1024, help="max bytes per Fetch (KB)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    result: dict[str, object] = {"benchmark": "fetch_cpu", "mib": args.mib,
                                 "batch_kb": args.batch_kb, "fetch_kb": args.fetch_kb}  # fmt: skip
    for sendfile in ("true", "false"):
        label = "sendfile" if sendfile == "true" else "copy"
        cases = {}
        for name, src in (("before", args.before), ("after", args.after)):
            cases[name] = run_case(src, sendfile, args)
            print(f"{label} {name}: {cases[name]}", file=sys.stderr)
        result[label] = cases
        b = cases["before"]["cpu_us_per_mib"]
        a = cases["after"]["cpu_us_per_mib"]
        result[f"{label}_after_over_before"] = round(float(a) / float(b), 3) if b else None  # type: ignore[arg-type]
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
