"""``records.encode_rows``: nanoseconds per row of Arrow columns turned into record batches per
partition, the native codec against its pure-Python fallback and today's per-row paths, in one
run (figures are ratios to the native codec measured beside them; the machine is shared).

Workload (issue 20's sink shape): ``--rows`` rows (100,000), ``--value-bytes``-byte values (100)
and 8-byte keys in pyarrow binary arrays, ``--partitions`` partitions (8), batches cut at
``--max-batch-bytes`` (1 MiB). Measured, alternated ``--repeat`` times, median kept:

* ``native``: ``records.encode_rows`` with the C codec, CRC-32C included;
* ``python``: the same call on the pure-Python fallback (one repeat: it is slow);
* ``build_batch``: the rows as Python tuples grouped by ``records.murmur2`` and encoded with
  ``records.build_batch`` per partition (a Python object per row: what a sink without the native
  encoder would do), on a tenth of the rows;
* ``produce``: confluent-kafka ``Producer.produce(topic, value, key)`` per row (``to_pylist``
  included), into librdkafka's queue with no broker reachable, purged after each run: the
  per-row cost of the sink's path today without the network (and without the partitioner:
  without metadata librdkafka parks the messages unpartitioned).

    python benchmarks/encode_rows.py [--rows 100000] [--repeat 5]

Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from strom.protocol import records


def columns(rows: int, value_bytes: int) -> tuple[pa.Array, pa.Array]:
    keys = pa.array([i.to_bytes(8, "little") for i in range(rows)], pa.binary())
    values = pa.array([bytes([65 + i % 26]) * value_bytes for i in range(rows)], pa.binary())
    return keys, values


def buffers(arr: pa.Array) -> tuple[Any, ...]:
    validity, offsets, data = arr.buffers()
    return validity, offsets, data, arr.offset, len(arr)


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter_ns()
    out = fn()
    return time.perf_counter_ns() - start, out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--max-batch-bytes", type=int, default=1 << 20)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    if not records.NATIVE_AVAILABLE:
        print(json.dumps({"ok": False, "error": "the native record codec is not built"}))
        return 2
    keys, values = columns(args.rows, args.value_bytes)
    kb, vb = buffers(keys), buffers(values)
    n, parts, cap, ts = args.rows, args.partitions, args.max_batch_bytes, 1_700_000_000_000

    def encode(impl: str) -> Callable[[], Any]:
        def run() -> Any:
            records.use(impl)
            return records.encode_rows(kb, vb, parts, 0, ts, cap)

        return run

    small = n // 10
    small_keys, small_values = keys.slice(0, small).to_pylist(), values.slice(0, small).to_pylist()

    def build_batch() -> Any:
        groups: dict[int, list[Any]] = {}
        for key, value in zip(small_keys, small_values, strict=True):
            p = (records.murmur2(key) & 0x7FFFFFFF) % parts
            groups.setdefault(p, []).append((key, value, [], ts))
        return {p: records.build_batch(rows) for p, rows in sorted(groups.items())}

    producer: Any = None
    try:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": "127.0.0.1:9", "partitioner": "murmur2_random",
                             "queue.buffering.max.messages": 2 * n + 10,
                             "queue.buffering.max.kbytes": 2**21, "linger.ms": 60_000,
                             "log_level": 0})  # fmt: skip
    except ImportError:
        pass

    def produce() -> None:
        assert producer is not None
        for key, value in zip(keys.to_pylist(), values.to_pylist(), strict=True):
            producer.produce("bench", value, key)
        producer.purge()
        producer.poll(0)  # serve the purged messages' reports: the queue empties

    samples: dict[str, list[float]] = {"native": [], "build_batch": [], "produce": []}
    rows_of = {"native": n, "build_batch": small, "produce": n, "python": n}
    out: Any = None
    for _ in range(args.repeat):
        elapsed, out = timed(encode("native"))
        samples["native"].append(elapsed / n)
        samples["build_batch"].append(timed(build_batch)[0] / small)
        if producer is not None:
            samples["produce"].append(timed(produce)[0] / n)
    elapsed, slow = timed(encode("python"))
    samples["python"] = [elapsed / n]
    records.use("native")
    if slow != out:
        print(json.dumps({"ok": False, "error": "native and python answers differ"}))
        return 1
    ns = {k: round(statistics.median(v), 1) for k, v in samples.items() if v}
    batches = sum(len(b) for b in out.values())
    print(json.dumps({
        "ok": True, "rows": n, "value_bytes": args.value_bytes, "partitions": parts,
        "max_batch_bytes": cap, "batches": batches,
        "bytes": sum(len(x) for b in out.values() for x in b),
        "ns_per_row": ns, "rows_measured": {k: rows_of[k] for k in ns},
        "ratio_to_native": {k: round(v / ns["native"], 1) for k, v in ns.items()},
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
