"""Where a broker's CPU goes during broker_throughput.py's produce and consume phases, thread by
thread: the "why" behind kafka_reference.py's CPU-per-million figures.

For each broker (strom, Apache Kafka; ``--only`` one): a fresh broker, the same untimed warm-up
as broker_throughput.py, then ``--messages`` 100-byte messages produced (linger.ms=5, acks=1,
one partition) and read back by a consumer, and with ``--transactions N`` N transactions of 100
records over 3 partitions (txn_throughput.py's ``txn_100``); around each phase every thread's CPU
(utime + stime of ``/proc/<pid>/task/<tid>/stat``) is read, and the threads are grouped by
name with their digits replaced by ``N`` (``data-plane-kafka-request-handler-3`` ->
``data-plane-kafka-request-handler-N``, ``GC Thread#1`` -> ``GC Thread#N``). A thread that
started and ended within a phase is not seen (its CPU is in ``unattributed_s``: the process's
total minus the threads'). With ``--pyspy`` strom's phases are also sampled by py-spy
(``--nonblocking``, 250 Hz) and the functions holding the most samples listed (self and
total shares of the broker's samples).

Prints ONE JSON line: per broker and phase ``cpu_s``, ``cpu_s_per_M``, ``threads``
(name -> CPU seconds, largest first) and for strom ``pyspy``.

    python benchmarks/broker_threads.py [--messages 1000000] [--pyspy] [--only kafka]
    python benchmarks/broker_threads.py --messages 200000 --transactions 1000
    python benchmarks/broker_threads.py --messages 333333 --size 1000 --compression lz4 --pyspy
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    Broker,
    create_topic,
    env_info,
    log,
    make_brokers,
    remove,
    warm_up,
    workdir,
)
from broker_throughput import PRODUCE_CONFIG, consume, produce  # noqa: E402
from txn_throughput import run as produce_in_transactions  # noqa: E402

TICK = 100.0  # USER_HZ: /proc's clock ticks per second on Linux
DIGITS = re.compile(r"\d+")


def thread_cpu(pid: int) -> dict[int, tuple[str, float]]:
    """tid -> (thread name, CPU seconds) for every live thread of ``pid``."""
    out: dict[int, tuple[str, float]] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:  # ended meanwhile
            continue
        # the name is in parentheses and may hold spaces: split after the last ')'
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        out[int(task.name)] = (name, (int(fields[11]) + int(fields[12])) / TICK)
    return out


def process_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


class PySpy:
    """py-spy sampling a process in the background (raw collapsed stacks into a file)."""

    def __init__(self, pid: int, out: Path) -> None:
        self.out = out
        self.proc = subprocess.Popen(
            ["py-spy", "record", "--format", "raw", "--rate", "250", "--nonblocking",
             "--pid", str(pid), "--output", str(out)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
        )  # fmt: skip

    def stop(self, top: int = 15) -> dict[str, Any]:
        self.proc.send_signal(2)  # SIGINT: py-spy writes its file and exits
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        if not self.out.exists():
            return {"error": "py-spy wrote nothing"}
        self_samples: collections.Counter[str] = collections.Counter()
        total_samples: collections.Counter[str] = collections.Counter()
        samples = 0
        for line in self.out.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if not stack or not count.isdigit():
                continue
            n = int(count)
            samples += n
            frames = [_frame(f) for f in stack.split(";")]
            self_samples[frames[-1]] += n
            for frame in set(frames):
                total_samples[frame] += n
        if not samples:
            return {"error": "no samples"}
        return {
            "samples": samples,
            "self": {f: round(n / samples, 3) for f, n in self_samples.most_common(top)},
            "total": {f: round(n / samples, 3) for f, n in total_samples.most_common(top + 10)},
        }


def _frame(frame: str) -> str:
    """``append (strom/storage/log.py:123)`` -> ``append (strom/storage/log.py)``."""
    frame = re.sub(r":\d+\)$", ")", frame.strip())
    return re.sub(r"\(.*?/site-packages/|\(.*?/src/", "(", frame)


def transactions(bootstrap: str, topic: str, messages: int, size: int) -> dict[str, Any]:
    return {"msgs_per_s": round(produce_in_transactions(bootstrap, topic, messages, size, 100))}


def measure(broker: Broker, phase: str, fn: Any, messages: int,
            spy_dir: Path | None) -> dict[str, Any]:  # fmt: skip
    pid = broker.pid
    assert pid is not None
    spy = PySpy(pid, spy_dir / f"{broker.name}-{phase}.txt") if spy_dir is not None else None
    if spy is not None:
        time.sleep(1.0)  # py-spy attached before the phase starts
    before, total0 = thread_cpu(pid), process_cpu(pid)
    result = fn()
    after, total1 = thread_cpu(pid), process_cpu(pid)
    per_name: dict[str, float] = collections.defaultdict(float)
    for tid, (name, cpu) in after.items():
        per_name[DIGITS.sub("N", name)] += cpu - before.get(tid, (name, 0.0))[1]
    cpu_s = total1 - total0
    threads = {n: round(s, 2) for n, s in sorted(per_name.items(), key=lambda kv: -kv[1])
               if s >= 0.01}  # fmt: skip
    figures: dict[str, Any] = {
        **result,
        "cpu_s": round(cpu_s, 2),
        "cpu_s_per_M": round(cpu_s * 1e6 / messages, 3),
        "threads": threads,
        "unattributed_s": round(cpu_s - sum(per_name.values()), 2),
    }
    if spy is not None:
        figures["pyspy"] = spy.stop()
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--warmup", type=float, default=10.0)
    parser.add_argument("--only", choices=("strom", "kafka"))
    parser.add_argument("--compression", default="none",
                        help="compression.type of the produce phase (lz4, zstd ...)")
    parser.add_argument("--pyspy", action="store_true", help="sample strom's phases with py-spy")
    parser.add_argument("--transactions", type=int, default=0,
                        help="also this many transactions of 100 records over 3 partitions "
                             "(txn_throughput.py's txn_100)")  # fmt: skip
    args = parser.parse_args()
    if args.pyspy and shutil.which("py-spy") is None:
        parser.error("py-spy is not on PATH (pip install '.[bench]')")

    if args.compression != "none":
        PRODUCE_CONFIG["compression.type"] = args.compression  # broker_throughput's producer
    out: dict[str, Any] = {"benchmark": "broker_threads", "messages": args.messages,
                           "size": args.size, "compression": args.compression}  # fmt: skip
    tmp = workdir()
    try:
        brokers, skipped = make_brokers(args.only, tmp, names=("strom", "kafka"))
        out.update({name: {"skipped": why} for name, why in skipped.items()})
        for broker in brokers:
            spy_dir = tmp if args.pyspy and broker.name == "strom" else None
            try:
                broker.start()
                warm_up(broker, args.warmup)
                topic = "bench-threads"
                create_topic(broker.bootstrap, topic, 1)
                n, size = args.messages, args.size
                res: dict[str, Any] = {"startup_s": broker.startup_s}
                log(f"{broker.name}: produce {n} x {size} B")
                res["produce"] = measure(broker, "produce", functools.partial(
                    produce, broker.bootstrap, topic, n, size, 1, 600), n, spy_dir)  # fmt: skip
                log(f"{broker.name}: consume")
                res["consume"] = measure(broker, "consume", functools.partial(
                    consume, broker.bootstrap, topic, n, size, 1, 600), n, spy_dir)  # fmt: skip
                if args.transactions:
                    txn_topic = "bench-threads-txn"
                    create_topic(broker.bootstrap, txn_topic, 3)
                    log(f"{broker.name}: {args.transactions} transactions of 100 records")
                    txn = measure(broker, "txn_100", functools.partial(
                        transactions, broker.bootstrap, txn_topic, 100 * args.transactions, size),
                        100 * args.transactions, spy_dir)  # fmt: skip
                    txn["cpu_ms_per_transaction"] = round(txn["cpu_s"] * 1000 / args.transactions, 2)
                    res["txn_100"] = txn
                out[broker.name] = res
            except Exception as exc:  # noqa: BLE001 - reported, never a number
                out[broker.name] = {"error": repr(exc), "log_tail": broker.log_tail()}
            finally:
                broker.stop()
    finally:
        remove(tmp)
    out["env"] = env_info()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
