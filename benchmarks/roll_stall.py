"""Roll stall: how long another client waits while a large segment rolls.

Compares two source trees in the same run (``--before``, default ``/work/main/src`` or the
``STROM_BEFORE_SRC`` environment variable; ``--after``, default this checkout's ``src``). For
each: a fresh broker, a topic with ``segment.bytes = --segment-mib``, the segment filled to just
below that (so its pages are dirty), a pause, then appends one at a time until one rolls the
segment, while a second connection sends ApiVersions back to back. Reports the worst and p99
round trip of that second client from the pause on, and the after/before ratios (one JSON
line). ``--repeat`` runs each tree several times, alternating.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import percentile, remove  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
VALUE = 950_000


def run_case(src: str, segment_mib: int) -> dict[str, object]:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from strom.testing import BrokerProcess
    from strom.testing.raw import RawConnection

    workdir = Path(tempfile.mkdtemp(prefix="strom-rollstall-"))
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = src
    proc = BrokerProcess(workdir / "data", log_file=workdir / "broker.log")
    latencies: list[float] = []
    measuring = threading.Event()
    stop = threading.Event()

    def probe() -> None:
        with RawConnection(proc.bootstrap, timeout=60) as conn:
            while not stop.is_set():
                t0 = time.perf_counter()
                conn.request(18, 0)
                if measuring.is_set():
                    latencies.append(time.perf_counter() - t0)
                time.sleep(0.002)

    try:
        proc.start(timeout=30.0)
        segment = segment_mib << 20
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        admin.create_topics([NewTopic("s", 1, 1, config={"segment.bytes": str(segment)})])[
            "s"
        ].result(30)
        producer = Producer({"bootstrap.servers": proc.bootstrap, "linger.ms": 0, "acks": 1,
                             "max.in.flight.requests.per.connection": 1})  # fmt: skip
        value = os.urandom(VALUE)
        fill = segment // (VALUE + 1000) - 1
        for _ in range(fill):
            while True:
                try:
                    producer.produce("s", value=value)
                    break
                except BufferError:
                    producer.poll(0.05)
        assert producer.flush(120) == 0
        prober = threading.Thread(target=probe)
        prober.start()
        time.sleep(0.5)
        measuring.set()
        seg_dir = proc.data_dir / "s-0"
        t_roll = time.perf_counter()
        sent = 0
        while len(list(seg_dir.glob("*.log"))) == 1 and sent < 10:
            producer.produce("s", value=value)
            assert producer.flush(60) == 0
            sent += 1
        roll_s = time.perf_counter() - t_roll
        time.sleep(0.5)
        stop.set()
        prober.join(60)
        ordered = sorted(latencies)
        return {"worst_ms": round(ordered[-1] * 1000, 1),
                "p99_ms": round((percentile(ordered, 99) or 0) * 1000, 1),
                "probes": len(ordered), "roll_request_s": round(roll_s, 3)}  # fmt: skip
    finally:
        stop.set()
        proc.stop(timeout=30.0)
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old
        remove(workdir)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default=os.environ.get("STROM_BEFORE_SRC", "/work/main/src"))
    parser.add_argument("--after", default=str(ROOT / "src"))
    parser.add_argument("--segment-mib", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    runs: dict[str, list[dict[str, object]]] = {"before": [], "after": []}
    for _ in range(args.repeat):
        for name, src in (("before", args.before), ("after", args.after)):
            res = run_case(src, args.segment_mib)
            print(f"{name}: {res}", file=sys.stderr)
            runs[name].append(res)

    def worst(name: str) -> float:
        return max(float(r["worst_ms"]) for r in runs[name])  # type: ignore[arg-type]

    result = {"benchmark": "roll_stall", "segment_mib": args.segment_mib, **runs,
              "worst_after_over_before": round(worst("after") / worst("before"), 3)}  # fmt: skip
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
