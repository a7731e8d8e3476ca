"""Instruction counts of fixed hot-path workloads against a recorded budget: CI's guard.

Seconds depend on the machine and on whoever else runs on it; instructions do not. Each
workload runs once to warm up (imports, caches, the interpreter's specialisation) and is then
counted once, under ``valgrind --tool=callgrind``:

* ``append``: 200 client batches of 50 records (100-byte values, 8-byte keys, every fourth
  batch LZ4-compressed) appended to a fresh ``Log`` with the full validation
  (``Log.append``, origin CLIENT: shape, CRC, the record walk);
* ``produce``: the same batches as 200 Produce v9 requests (acks=1) through a broker running
  in this process (``produce_cpu.broker_connection``): framing, decoding, the handler, the append,
  the response;
* ``fetch``: 20 Fetch v12 requests (64 KiB each) reading the produced batches back through the
  same connection;
* ``decode``: the batches decoded into one Arrow RecordBatch, as the Spark source does
  (``records.segment`` per batch, ``records.decode_columns``, ``spark.schema.arrow_from_columns``);
* ``encode``: the other way, as the Spark sink's Produce path does: the same 10,000 rows (8-byte
  keys, 100-byte values) as pyarrow binary columns into batches of at most 64 KiB for 8
  partitions (``records.encode_rows``: murmur2 partitioning, the records, a CRC per batch).

Valgrind starts with instrumentation off (``--instr-atstart=no``: the imports and the broker's
start-up run at a few times native speed, not fifty). Around each counted workload the script
switches it on and dumps a profile part through callgrind's client requests, made by a
four-line C helper compiled here against valgrind's ``<valgrind/callgrind.h>`` (Debian's
``valgrind`` package ships it; ``cc`` builds strom's own extension too). The part's total is
the workload's instruction count (Ir). Repeated runs agree to well under 1 %.

The budget is ``benchmarks/instruction_budget.json``. A workload that counts more than
``tolerance`` (1.5) times its budget fails the guard; a change that means to cost more updates
the budget in the same commit (``--update``). Counts far below the budget are reported
(``"below": true``) so the budget can be lowered and keep its bite.

    python benchmarks/instruction_guard.py            # measure, compare, exit 1 on a breach
    python benchmarks/instruction_guard.py --update   # write the counts as the new budget

Prints one JSON line. Runs in tens of seconds (``tests/guard/test_instruction_budget.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import os
import platform
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
BUDGET = HERE / "instruction_budget.json"
TOLERANCE = 1.5
BATCHES = 200
RECORDS_PER_BATCH = 50
FETCH_REQUESTS = 20
FETCH_BYTES = 64 * 1024
ENCODE_PARTITIONS = 8
ENCODE_MAX_BATCH_BYTES = 64 * 1024

HELPER_C = """
#include <valgrind/callgrind.h>
void strom_count_begin(void) { CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION; }
void strom_count_end(const char *name) { CALLGRIND_DUMP_STATS_AT(name); CALLGRIND_STOP_INSTRUMENTATION; }
"""


class GuardError(RuntimeError):
    """The guard could not measure (no valgrind, no compiler, no native codec...)."""


# --- the workloads (inside valgrind) -----------------------------------------------------------


def make_batches(now_ms: int) -> list[bytes]:
    from strom.protocol import compression
    from strom.protocol import record_batch as rb

    out = []
    for b in range(BATCHES):
        recs = [(b"key-%04d" % (i % 1000), bytes([65 + i % 26]) * 100, [], now_ms + i)
                for i in range(RECORDS_PER_BATCH)]  # fmt: skip
        codec = compression.LZ4 if b % 4 == 3 else compression.NONE
        out.append(rb.build_batch(recs, compression=codec))
    return out


def encode_columns() -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """The ``encode`` workload's rows: make_batches' keys and values as pyarrow binary columns,
    passed as their buffers (what the Spark sink hands ``records.encode_rows``)."""
    import pyarrow as pa

    rows = range(BATCHES * RECORDS_PER_BATCH)
    keys = pa.array([b"key-%04d" % (i % 1000) for i in rows], pa.binary())
    values = pa.array([bytes([65 + i % 26]) * 100 for i in rows], pa.binary())
    key_buffers = (*keys.buffers(), keys.offset, len(keys))
    return key_buffers, (*values.buffers(), values.offset, len(values))


def produce_frames(batches: list[bytes], first_correlation: int) -> list[bytes]:
    import kio.schema.produce.v9.request as req

    from strom.protocol.messages import RequestHeader, build, encode_request

    frames = []
    for i, batch in enumerate(batches):
        request = build(req.ProduceRequest, transactional_id=None, acks=1, timeout=30000,
                        topic_data=(build(req.TopicProduceData, name="bench", partition_data=(
                            build(req.PartitionProduceData, index=0, records=batch),)),))
        frames.append(encode_request(RequestHeader(0, 9, first_correlation + i, "guard"),
                                     request))  # fmt: skip
    return frames


def fetch_frames(first_offset: int, first_correlation: int) -> list[bytes]:
    import kio.schema.fetch.v12.request as req

    from strom.protocol.messages import RequestHeader, build, encode_request

    frames = []
    step = BATCHES * RECORDS_PER_BATCH // FETCH_REQUESTS
    for i in range(FETCH_REQUESTS):
        part = build(req.FetchPartition, partition=0, current_leader_epoch=-1,
                     fetch_offset=first_offset + i * step, last_fetched_epoch=-1,
                     log_start_offset=-1, partition_max_bytes=FETCH_BYTES)  # fmt: skip
        request = build(req.FetchRequest, replica_id=-1, max_wait=0, min_bytes=1,
                        max_bytes=FETCH_BYTES, isolation_level=0, session_id=0,
                        session_epoch=-1,
                        topics=(build(req.FetchTopic, topic="bench", partitions=(part,)),),
                        forgotten_topics_data=(), rack_id="")  # fmt: skip
        frames.append(encode_request(RequestHeader(1, 12, first_correlation + i, "guard"),
                                     request))  # fmt: skip
    return frames


class FrameCounter(asyncio.Transport):
    """A transport that counts the complete response frames written to it."""

    def __init__(self) -> None:
        super().__init__()
        self.frames = 0
        self.pending = bytearray()
        self.closing = False
        self.writes = 0

    def write(self, data: Any) -> None:
        self.writes += 1
        self.pending += data
        while len(self.pending) >= 4:
            (size,) = struct.unpack_from(">i", self.pending)
            if len(self.pending) < 4 + size:
                break
            del self.pending[: 4 + size]
            self.frames += 1

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


async def feed(conn: Any, transport: FrameCounter, frames: list[bytes]) -> None:
    """Hand ``frames`` to the connection four at a time and wait for every response."""
    expected = transport.frames + len(frames)
    for i in range(0, len(frames), 4):
        conn.data_received(b"".join(frames[i : i + 4]))
        while conn.queue or conn.out:
            await asyncio.sleep(0)
    for _ in range(100_000):
        if transport.frames >= expected:
            return
        await asyncio.sleep(0)
    raise GuardError(f"{expected - transport.frames} responses missing")


class Counter:
    """Callgrind's client requests through the compiled helper (or a no-op outside valgrind)."""

    def __init__(self, helper: str | None) -> None:
        self.lib = ctypes.CDLL(helper) if helper else None
        if self.lib is not None:
            self.lib.strom_count_end.argtypes = [ctypes.c_char_p]

    def begin(self) -> None:
        if self.lib is not None:
            self.lib.strom_count_begin()

    def end(self, name: str) -> None:
        if self.lib is not None:
            self.lib.strom_count_end(name.encode())


def run_workloads(helper: str | None) -> dict[str, Any]:
    """Run every workload twice, counting the second run; returns sanity facts."""
    from strom.clock import FakeClock
    from strom.protocol import record_batch as rb
    from strom.protocol import records
    from strom.spark.schema import arrow_from_columns, arrow_schema
    from strom.storage.log import Log
    from strom.storage.log_config import LogConfig

    if records.IMPLEMENTATION != "native":
        raise GuardError("the native record codec is not in use (not built, or STROM_NATIVE=0)")
    counter = Counter(helper)
    facts: dict[str, Any] = {}
    tmp = Path(tempfile.mkdtemp(prefix="strom-guard-"))
    try:
        now = int(time.time() * 1000)
        batches = make_batches(now)
        clock = FakeClock(now)
        for run, counted in ((0, False), (1, True)):
            log = Log.open(tmp / f"append-{run}" / "bench-0", LogConfig(), clock)
            if counted:
                counter.begin()
            for batch in batches:
                log.append(batch)
            if counted:
                counter.end("append")
            facts["append_end_offset"] = log.log_end_offset
            log.close()

        schema = arrow_schema(False)
        for counted in (False, True):
            if counted:
                counter.begin()
            segments = [records.segment(rb.parse_header(b), b) for b in batches]
            cols = records.decode_columns(segments)
            table = arrow_from_columns(cols, "bench", 0, schema)
            if counted:
                counter.end("decode")
            facts["decode_rows"] = table.num_rows
        keys, values = encode_columns()
        for counted in (False, True):
            if counted:
                counter.begin()
            encoded = records.encode_rows(keys, values, ENCODE_PARTITIONS, 0, now,
                                          ENCODE_MAX_BATCH_BYTES)  # fmt: skip
            if counted:
                counter.end("encode")
            facts["encode_rows"] = sum(rb.parse_header(b).record_count
                                       for part in encoded.values() for b in part)  # fmt: skip
        asyncio.run(_broker_workloads(counter, batches, facts))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return facts


async def _broker_workloads(counter: Counter, batches: list[bytes], facts: dict[str, Any]) -> None:
    from produce_cpu import bench_log, broker_connection

    transport = FrameCounter()
    settings = {"strom.fetch.sendfile.enable": "false"}
    async with broker_connection(transport, settings) as (broker, conn):
        per_run = BATCHES * RECORDS_PER_BATCH
        for run in range(2):
            frames = produce_frames(batches, 1000 * run)
            fetches = fetch_frames(run * per_run, 1000 * run + 500)
            if run:
                counter.begin()
            await feed(conn, transport, frames)
            if run:
                counter.end("produce")
            written = transport.writes
            if run:
                counter.begin()
            await feed(conn, transport, fetches)
            if run:
                counter.end("fetch")
            facts["fetch_writes"] = transport.writes - written
        facts["produce_end_offset"] = bench_log(broker).log_end_offset


# --- the driver --------------------------------------------------------------------------------


def build_helper(work: Path) -> Path:
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if cc is None:
        raise GuardError("no C compiler (cc) to build the callgrind helper")
    source = work / "count.c"
    source.write_text(HELPER_C)
    out = work / "count.so"
    done = subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(out), str(source)],
                          capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        raise GuardError(f"cannot build the callgrind helper (is valgrind installed?): "
                         f"{done.stderr.strip()[-300:]}")  # fmt: skip
    return out


def parse_parts(work: Path) -> dict[str, int]:
    """Workload name -> instructions, from the dumped profile parts."""
    counts: dict[str, int] = {}
    for path in sorted(work.glob("callgrind.out*")):
        name = total = None
        for line in path.read_text(errors="replace").splitlines():
            if line.startswith("desc: Trigger: Client Request: "):
                name = line.removeprefix("desc: Trigger: Client Request: ").strip()
            elif line.startswith("summary: ") or line.startswith("totals: "):
                total = int(line.split()[1])
        if name and total is not None:
            counts[name] = total
    return counts


def measure() -> tuple[dict[str, int], dict[str, Any]]:
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise GuardError("valgrind is not installed (apt-get install -y valgrind)")
    work = Path(tempfile.mkdtemp(prefix="strom-guard-cg-"))
    try:
        helper = build_helper(work)
        env = {k: v for k, v in os.environ.items() if k != "STROM_NATIVE"}
        env["PYTHONHASHSEED"] = "0"  # the same dict and set layouts in every run
        src = HERE.parent / "src"
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(src), str(HERE.parent),
                                                        env.get("PYTHONPATH", "")) if p)
        cmd = [valgrind, "--tool=callgrind", "--instr-atstart=no",
               f"--callgrind-out-file={work / 'callgrind.out'}", "--dump-instr=no",
               sys.executable, str(Path(__file__).resolve()), "--workload", str(helper)]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
        if done.returncode != 0:
            raise GuardError(f"the workloads failed under valgrind:\n{done.stderr[-3000:]}")
        facts = json.loads(done.stdout.strip().splitlines()[-1])
        counts = parse_parts(work)
        missing = {"append", "decode", "encode", "produce", "fetch"} - counts.keys()
        if missing:
            raise GuardError(f"no instruction count for {sorted(missing)}:\n{done.stderr[-2000:]}")
        return counts, facts
    finally:
        shutil.rmtree(work, ignore_errors=True)


def compare(counts: dict[str, int], budget: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    tolerance = float(budget.get("tolerance", TOLERANCE))
    ok = True
    report: dict[str, Any] = {}
    for name, count in sorted(counts.items()):
        allowed = budget.get("workloads", {}).get(name, {}).get("instructions")
        if allowed is None:
            report[name] = {"instructions": count, "budget": None}
            ok = False
            continue
        ratio = count / allowed
        breach = ratio > tolerance
        ok = ok and not breach
        report[name] = {"instructions": count, "budget": allowed, "ratio": round(ratio, 3),
                        "over": breach, "below": ratio < 1 / tolerance}  # fmt: skip
    return ok, report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--update", action="store_true", help="record the counts as the budget")
    parser.add_argument("--workload", metavar="HELPER", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.workload is not None:  # inside valgrind
        sys.path.insert(0, str(HERE))
        import logging

        logging.basicConfig(level=logging.WARNING)
        print(json.dumps(run_workloads(args.workload or None)))
        return 0
    try:
        counts, facts = measure()
    except GuardError as exc:
        print(json.dumps({"ok": False, "error": str(exc)}))
        return 2
    expected = {"append_end_offset": BATCHES * RECORDS_PER_BATCH,
                "decode_rows": BATCHES * RECORDS_PER_BATCH,
                "encode_rows": BATCHES * RECORDS_PER_BATCH,
                "produce_end_offset": 2 * BATCHES * RECORDS_PER_BATCH}  # fmt: skip
    wrong = {k: (facts.get(k), v) for k, v in expected.items() if facts.get(k) != v}
    if wrong:
        print(json.dumps({"ok": False, "error": f"the workloads did not do their work: {wrong}"}))
        return 2
    if args.update:
        budget = {
            "tolerance": TOLERANCE,
            "note": "benchmarks/instruction_guard.py --update; a workload over tolerance x its "
                    "budget fails CI (tests/guard)",
            "recorded_with": {"python": platform.python_version(),
                              "implementation": platform.python_implementation(),
                              "machine": platform.machine()},
            "workloads": {name: {"instructions": count} for name, count in sorted(counts.items())},
        }  # fmt: skip
        BUDGET.write_text(json.dumps(budget, indent=2) + "\n")
        print(json.dumps({"ok": True, "updated": str(BUDGET), "counts": counts}))
        return 0
    budget = json.loads(BUDGET.read_text())
    ok, report = compare(counts, budget)
    print(json.dumps({"ok": ok, "tolerance": budget.get("tolerance", TOLERANCE),
                      "workloads": report, "facts": facts}))  # fmt: skip
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
