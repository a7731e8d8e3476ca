"""Produce and consume through several strom source trees and Tansu, alternated, in one run.

The figures issue 20 asks for are ratios measured side by side: broker CPU per produced message
and produce msgs/s of this tree against an older commit (``--tree before=/path/to/checkout``,
as many as wanted) and against Tansu, and consume msgs/s. Each **round** starts every broker in
turn (the order rotates from round to round, so none always runs first on a cooling machine),
produces ``--messages`` values of ``--size`` bytes with one confluent-kafka Producer
(``linger.ms=5``, ``acks=1``: broker_throughput.py's workload), reads them back with a Consumer
``assign()``ed from the beginning, and stops the broker by PID. ``--client kcat`` produces and
consumes with kcat instead (a client in C: on a loaded two-core machine the Python producer
loop, not the broker, sets the Python client's rate), run on the librdkafka confluent-kafka
bundles (``--kcat-librdkafka``: Debian's kcat links librdkafka 2.0, which cannot talk to
Tansu), and reports kcat's own CPU per message (``produce_client_cpu_us_per_msg``). A strom tree runs as
``python -m strom serve`` with ``PYTHONPATH=<tree>/src`` (so a tree as old as the first wave's
works without installing it).

Per broker: the median and the spread (min-max) over the rounds of ``produce_msgs_per_s``,
``produce_cpu_us_per_msg`` (broker utime+stime during the produce phase, per message),
``produce_sched_ns_per_msg`` (the same from the threads' schedstat, in ns: finer),
``consume_msgs_per_s`` and ``consume_cpu_us_per_msg``. ``ratios``: for every pair (a, b), the
median over the rounds of the per-round ratio a/b, so both sides of a ratio come from minutes
apart on the same machine.

    python benchmarks/produce_compare.py --tree after=. --tree dfb5704=/work/wt-dfb5704 \
        --tree base=/work/base --rounds 5 --messages 1000000

Prints one JSON line (progress on stderr).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    Broker,
    TansuBroker,
    cpu_seconds,
    create_topic,
    env_info,
    log,
    remove,
    tansu_binary,
    workdir,
)
from broker_throughput import consume, produce  # noqa: E402

from strom.testing import free_port, wait_for_port  # noqa: E402


class TreeBroker(Broker):
    """``python -m strom serve`` from one source tree (``PYTHONPATH=<tree>/src``)."""

    def __init__(self, name: str, tree: Path, work: Path) -> None:
        self.name = name
        self.tree = tree
        self.work = work
        self._proc: subprocess.Popen[bytes] | None = None
        self.bootstrap = ""

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def start(self) -> None:
        port = free_port()
        self.bootstrap = f"127.0.0.1:{port}"
        data = self.work / f"{self.name}-data"
        remove(data)
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "STROM_NATIVE")}
        env["PYTHONPATH"] = f"{self.tree / 'src'}{os.pathsep}{self.tree}"
        # no admin listener: two brokers on its default port clash (older trees ignore the key)
        cmd = [sys.executable, "-m", "strom", "serve", "--data-dir", str(data), "--listen",
               self.bootstrap, "--set", "log.cleaner.enable=false",
               "--set", "strom.admin.listener="]  # fmt: skip
        with open(self.work / f"{self.name}.log", "ab") as out:
            self._proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                          cwd=self.work)  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited: {self.log_tail()}")
            if wait_for_port("127.0.0.1", port, 0.2):
                return
        raise RuntimeError(f"{self.name} did not listen within 60 s")

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)

    def log_tail(self) -> str:
        try:
            text = (self.work / f"{self.name}.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-20:])


def kcat_env(work: Path, librdkafka: str) -> dict[str, str]:
    """The environment kcat runs in: with ``librdkafka="bundled"``, the librdkafka that
    confluent-kafka's wheel bundles (2.x, recent) in place of the system one. Debian's kcat
    links librdkafka 2.0, which cannot parse the tagged fields of Tansu's ApiVersions v3 answer
    (every connection fails with "Read underflow"), so without this kcat cannot reach Tansu.
    Every broker of a run gets the same client."""
    env = dict(os.environ)
    if librdkafka == "system":
        return env
    import confluent_kafka  # noqa: PLC0415

    libs = Path(confluent_kafka.__file__).resolve().parent.parent / "confluent_kafka.libs"
    found = sorted(libs.glob("librdkafka*.so*"))
    if not found:
        raise RuntimeError(f"no librdkafka in {libs}: use --kcat-librdkafka system")
    shim = work / "librdkafka"
    shim.mkdir(exist_ok=True)
    link = shim / "librdkafka.so.1"  # the soname kcat asks for
    if not link.exists():
        link.symlink_to(found[0])
    env["LD_LIBRARY_PATH"] = f"{shim}{os.pathsep}{env.get('LD_LIBRARY_PATH', '')}".rstrip(
        os.pathsep)
    return env


def children_cpu() -> float:
    """utime + stime of the finished children (kcat) so far, in seconds."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def kcat_produce(bootstrap: str, topic: str, args: argparse.Namespace) -> dict[str, Any]:
    """``kcat -P`` from a file of ``--messages`` lines: a client in C, so the produce rate is
    the broker's (and librdkafka's), not a Python loop's. ``client_cpu_s``: kcat's own CPU."""
    path = Path(args.kcat_file)
    cpu0 = children_cpu()
    start = time.perf_counter()
    done = subprocess.run(["kcat", "-P", "-b", bootstrap, "-t", topic, "-X", "linger.ms=5",
                           "-X", "acks=1", "-l", str(path)], capture_output=True, text=True,
                          timeout=args.timeout, env=args.kcat_env)  # fmt: skip
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"kcat -P failed: {done.stderr[-500:]}")
    return {"msgs_per_s": round(args.messages / elapsed), "client_cpu_s": children_cpu() - cpu0}


def kcat_consume(bootstrap: str, topic: str, args: argparse.Namespace) -> dict[str, Any]:
    start = time.perf_counter()
    done = subprocess.run(["kcat", "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e",
                           "-q", "-c", str(args.messages), "-f", "%o\n"], capture_output=True,
                          timeout=args.timeout, env=args.kcat_env)  # fmt: skip
    elapsed = time.perf_counter() - start
    got = done.stdout.count(b"\n")
    if done.returncode != 0 or got != args.messages:
        raise RuntimeError(f"kcat -C read {got} of {args.messages}: {done.stderr[-500:]!r}")
    return {"msgs_per_s": round(args.messages / elapsed)}


def cpu_ns(pid: int | None) -> int | None:
    """Nanoseconds on a CPU of a live process's threads (``/proc/<pid>/task/*/schedstat``): a
    finer figure than ``cpu_seconds`` (clock ticks of 10 ms, a tenth of a 1,000,000-message
    produce phase's broker CPU). Only threads alive at the reading count, so a phase's figure
    is a difference of two readings of threads that outlive it (the brokers' do)."""
    if pid is None:
        return None
    total = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tids:
        try:
            total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return total


def one_round(broker: Broker, args: argparse.Namespace, index: int) -> dict[str, Any]:
    broker.start()
    try:
        topic = f"compare-{index}"
        create_topic(broker.bootstrap, topic, args.partitions)
        c0 = cpu_seconds(broker.pid)
        n0 = cpu_ns(broker.pid)
        if args.client == "kcat":
            res = kcat_produce(broker.bootstrap, topic, args)
        else:
            res = produce(broker.bootstrap, topic, args.messages, args.size, args.partitions,
                          args.timeout)  # fmt: skip
        c1 = cpu_seconds(broker.pid)
        n1 = cpu_ns(broker.pid)
        if args.client == "kcat":
            got = kcat_consume(broker.bootstrap, topic, args)
        else:
            got = consume(broker.bootstrap, topic, args.messages, args.size, args.partitions,
                          args.timeout)  # fmt: skip
        c2 = cpu_seconds(broker.pid)
        assert c0 is not None and c1 is not None and c2 is not None
        out = {
            "produce_msgs_per_s": res["msgs_per_s"],
            "produce_cpu_us_per_msg": round((c1 - c0) * 1e6 / args.messages, 3),
            "consume_msgs_per_s": got["msgs_per_s"],
            "consume_cpu_us_per_msg": round((c2 - c1) * 1e6 / args.messages, 3),
            "load_1m": round(os.getloadavg()[0], 1),
            "produce_sched_ns_per_msg": round((n1 - n0) / args.messages, 1)
            if n0 is not None and n1 is not None else None,
        }
        if "client_cpu_s" in res:
            out["produce_client_cpu_us_per_msg"] = round(res["client_cpu_s"] * 1e6
                                                         / args.messages, 3)  # fmt: skip
        return out
    finally:
        broker.stop()


def summary(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3)}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", default=[], metavar="NAME=PATH",
                        help="a strom source tree to run (repeatable)")  # fmt: skip
    parser.add_argument("--no-tansu", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--client", choices=["python", "kcat"], default="python",
                        help="python: confluent-kafka in a Python loop (broker_throughput's "
                             "workload); kcat: kcat -P / -C, a client in C")  # fmt: skip
    parser.add_argument("--kcat-librdkafka", choices=["bundled", "system"], default="bundled",
                        help="bundled: kcat runs on confluent-kafka's librdkafka (the system "
                             "one, 2.0 on Debian, cannot talk to Tansu); system: as installed")  # fmt: skip
    args = parser.parse_args()
    work = workdir()
    if args.client == "kcat":
        args.kcat_env = kcat_env(work, args.kcat_librdkafka)
        args.kcat_file = str(work / "values.txt")
        with open(args.kcat_file, "wb") as out:
            line = b"x" * args.size + b"\n"
            for _ in range(args.messages // 10_000):
                out.write(line * 10_000)
            out.write(line * (args.messages % 10_000))
    brokers: list[Broker] = []
    for spec in args.tree or ["after=."]:
        name, _, path = spec.partition("=")
        brokers.append(TreeBroker(name, Path(path).resolve(), work))
    binary = None if args.no_tansu else tansu_binary()
    if binary:
        brokers.append(TansuBroker(work, binary))
    rounds: list[dict[str, dict[str, Any]]] = []
    try:
        for r in range(args.rounds):
            order = brokers[r % len(brokers) :] + brokers[: r % len(brokers)]
            got: dict[str, dict[str, Any]] = {}
            for broker in order:
                log(f"round {r}: {broker.name}")
                try:
                    got[broker.name] = one_round(broker, args, r)
                except Exception as exc:  # noqa: BLE001 - report, never fake a figure
                    got[broker.name] = {"error": f"{type(exc).__name__}: {exc}",
                                        "log_tail": broker.log_tail()}  # fmt: skip
                log(f"  {got[broker.name]}")
            rounds.append(got)
    finally:
        for broker in brokers:
            broker.stop()
        remove(work)
    keys = ["produce_msgs_per_s", "produce_cpu_us_per_msg", "consume_msgs_per_s",
            "consume_cpu_us_per_msg"]  # fmt: skip
    keys.append("produce_sched_ns_per_msg")
    if args.client == "kcat":
        keys.append("produce_client_cpu_us_per_msg")
    result: dict[str, Any] = {"rounds": rounds, "brokers": {}, "ratios": {}}
    names = [b.name for b in brokers]
    for name in names:
        ok = [r[name] for r in rounds if "error" not in r.get(name, {"error": 1})]
        if ok:
            result["brokers"][name] = {k: summary([o[k] for o in ok]) for k in keys}
    for a, b in itertools.permutations(names, 2):
        per_key = {}
        for k in keys:
            ratios = [r[a][k] / r[b][k] for r in rounds
                      if "error" not in r.get(a, {"error": 1}) and "error" not in r.get(b, {"error": 1})
                      and r[b][k]]  # fmt: skip
            if ratios:
                per_key[k] = summary(ratios)
        result["ratios"][f"{a}/{b}"] = per_key
    env = env_info()
    env.update({"messages": args.messages, "size": args.size, "partitions": args.partitions,
                "producer": "linger.ms=5 acks=1", "client": args.client,
                "load_avg": os.getloadavg(),
                "trees": args.tree})  # fmt: skip
    result["env"] = env
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
