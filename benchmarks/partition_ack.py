"""Produce ack latency against the partition count (issue 29): strom and Tansu, one run.

The workload, exactly as the issue measured it: one broker, a topic of N partitions,
confluent-kafka producing ``--messages`` (20,000) 100-byte messages round-robin over all N
partitions (message *i* to partition *i* mod N) at ``--rate`` (2,000 msgs/s) with
``linger.ms=1`` and ``acks=1``; each message's ack latency is the time from ``produce()`` to
its delivery callback. N = 1 is the reference (the same client at the same rate), then 1,000
and 10,000 partitions (``--partitions``). Each topic is fresh and the producer is new, so the
client meets every partition during the measurement, as a real client does; before the clock
starts it has only connected and read the topic's metadata once.

Every round runs strom and Tansu back to back (the order alternates between rounds), and the
figures are the medians over ``--rounds`` with their spread (min, max). Progress on stderr,
one JSON line on stdout:

- ``<broker>.p<N>``: ``p50_ms``, ``p99_ms``, ``max_ms`` per round and their medians, with the
  pace the producer kept (``rate_achieved``) and the broker process's CPU per message;
- ``ratios``: strom's N-partition p99 over its own 1-partition p99 (target <= 5 at 10,000)
  and over Tansu's N-partition p99 (target <= 2), per round and the median;
- ``env``: CPU count, load average before and after, versions, commit.

``--before SRC`` adds strom from another tree (``strom_before``); ``--probe`` runs strom with
``benchmarks/loop_probe.py`` (loop time per request type, loop lag, stalls), ``--pyspy``
adds py-spy's samples of the loop thread. See benchmarks/README.md.

    python benchmarks/partition_ack.py                        # 3 rounds, ~10-25 min
    python benchmarks/partition_ack.py --rounds 1 --only strom --partitions 1,10000
    python benchmarks/partition_ack.py --before /work/base/src --probe --pyspy
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import loop_probe  # noqa: E402
from _common import (  # noqa: E402
    Broker,
    StromBroker,
    cpu_seconds,
    create_topic,
    env_info,
    log,
    make_brokers,
    percentile,
    remove,
    workdir,
)
from confluent_kafka import KafkaError, Producer  # noqa: E402

STAT_WINDOWS = ("rtt", "int_latency", "outbuf_latency")


def _own_cpu() -> float:
    """This process's CPU seconds, every thread (librdkafka's included)."""
    t = os.times()
    return t.user + t.system


def ack_run(bootstrap: str, topic: str, partitions: int, messages: int, rate: int,
            linger_ms: int, warmup: bool, pid: int | None, timeout: float,
            client_stats: bool = False,
            on_start: Callable[[], None] | None = None,
            on_end: Callable[[], None] | None = None) -> dict[str, Any]:  # fmt: skip
    """One paced producer; returns the ack latency percentiles of every message.
    ``on_start`` is called as the clock starts, ``on_end`` once every message is
    acknowledged (a profiler's cues)."""
    windows: list[dict[str, float]] = []  # librdkafka's statistics, 1 s windows
    measuring = [False]

    def on_stats(raw: str) -> None:
        if not measuring[0]:
            return
        for b in json.loads(raw).get("brokers", {}).values():
            if b.get("nodeid", -1) >= 0 and b.get("rtt", {}).get("cnt"):
                windows.append({k: b[k]["p99"] / 1000 for k in STAT_WINDOWS})

    config: dict[str, Any] = {"bootstrap.servers": bootstrap, "linger.ms": linger_ms,
                              "acks": 1, "queue.buffering.max.messages": 1_000_000}
    if client_stats:
        config.update({"statistics.interval.ms": 1000, "stats_cb": on_stats})
    producer = Producer(config)
    producer.list_topics(topic, timeout=30)  # connected, the topic known
    if warmup:  # one message per partition, delivered before the clock starts
        for p in range(partitions):
            producer.produce(topic, b"\0" * 8, partition=p)
            if p % 1000 == 999:
                producer.poll(0)
        if producer.flush(timeout):
            raise TimeoutError(f"{topic}: warm-up not delivered within {timeout}s")
    acks: list[float] = []
    failed = [0]

    def on_delivery(err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            failed[0] += 1
            return
        acks.append((time.monotonic_ns() - int.from_bytes(msg.value()[:8], "big")) / 1e6)

    if on_start is not None:
        on_start()
    producer.poll(0)  # the statistics of the warm-up, before measuring
    measuring[0] = True
    cpu0 = cpu_seconds(pid)
    client0 = _own_cpu()
    start = time.monotonic()
    behind = 0.0
    for i in range(messages):
        target = start + i / rate
        now = time.monotonic()
        if target > now:
            time.sleep(target - now)
        else:
            behind = max(behind, now - target)
        producer.produce(topic, time.monotonic_ns().to_bytes(8, "big") + b"x" * 92,
                         partition=i % partitions, on_delivery=on_delivery)  # fmt: skip
        producer.poll(0)
    sent = time.monotonic() - start
    if producer.flush(timeout):
        raise TimeoutError(f"{topic}: messages not delivered within {timeout}s")
    cpu1 = cpu_seconds(pid)
    wall = time.monotonic() - start
    if on_end is not None:
        on_end()
    client_cpu = _own_cpu() - client0
    producer.poll(1.1)  # one more statistics window
    if failed[0] or len(acks) != messages:
        raise RuntimeError(f"{topic}: {len(acks)}/{messages} delivered, {failed[0]} failed")
    acks.sort()
    return {
        "p50_ms": _r(percentile(acks, 50)),
        "p99_ms": _r(percentile(acks, 99)),
        "max_ms": _r(acks[-1]),
        "rate_achieved": round(messages / sent),
        "producer_max_behind_ms": round(behind * 1000, 1),
        "broker_cpu_us_per_message": None if cpu0 is None or cpu1 is None
        else round((cpu1 - cpu0) * 1e6 / messages, 1),
        # this process (Python and librdkafka's threads): near 1.0, the client sets the pace
        "client_cores_busy": round(client_cpu / wall, 2),
        # where the time went, from librdkafka's statistics (the worst 1 s window's p99):
        # request sent -> response (rtt), queued in the client before a request is made
        # (int_latency), request made -> written to the socket (outbuf_latency)
        **{f"{k}_p99_ms_worst_window": max((w[k] for w in windows), default=None)
           for k in STAT_WINDOWS},
    }


def one_broker(broker: Broker, args: argparse.Namespace, rnd: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    broker.start()
    log(f"round {rnd}: {broker.name} pid {broker.pid} at {broker.bootstrap}")
    try:
        for n in args.partitions:
            topic = f"ack-{n}-r{rnd}"
            try:
                t0 = time.monotonic()
                create_topic(broker.bootstrap, topic, n, timeout=args.timeout)
                created = time.monotonic() - t0
                time.sleep(args.settle)  # creation's after-effects out of the measurement
                profile = Profile(broker, args.pyspy)
                res = ack_run(broker.bootstrap, topic, n, args.messages, args.rate,
                              args.linger_ms, not args.no_warmup, broker.pid, args.timeout,
                              args.client_stats, profile.start, profile.stop)  # fmt: skip
                res["create_topic_s"] = round(created, 2)
                res.update(profile.results())
            except Exception as exc:  # noqa: BLE001 - report, never fake a figure
                log(traceback.format_exc())
                res = {"error": f"{type(exc).__name__}: {exc}"[:500],
                       "log_tail": broker.log_tail()[-2000:]}  # fmt: skip
            log(f"round {rnd}: {broker.name} p{n}: {res}")
            out[f"p{n}"] = res
    finally:
        broker.stop()
    return out


class StromUnderTest(StromBroker):
    """strom from this process's ``PYTHONPATH`` (or from ``src``, another tree's ``src``
    directory: ``strom_before``), with the loop probe (``benchmarks/loop_probe.py``) when
    ``probe_dir`` is given: its figures are written to ``probe_file`` on ``SIGUSR2``."""

    def __init__(self, workdir: Path, name: str, src: str | None = None,
                 probe_dir: Path | None = None) -> None:  # fmt: skip
        (workdir / name).mkdir(parents=True, exist_ok=True)
        super().__init__(workdir / name)
        self.name = name
        self.src = src
        self.probe_dir = probe_dir
        self.probe_file = workdir / name / "loop-probe.json" if probe_dir else None

    def start(self) -> None:
        saved = {k: os.environ.get(k) for k in ("PYTHONPATH", "STROM_LOOP_PROBE")}
        path = self.src if self.src is not None else os.environ.get("PYTHONPATH", "")
        if self.probe_dir is not None:
            path = f"{self.probe_dir}:{path}" if path else str(self.probe_dir)
            os.environ["STROM_LOOP_PROBE"] = str(self.probe_file)
        if path:
            os.environ["PYTHONPATH"] = path  # the broker process inherits both
        try:
            super().start()
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


class Profile:
    """The loop probe's window (and py-spy's recording) around one measurement of a probed
    strom; nothing for another broker."""

    def __init__(self, broker: Broker, pyspy: bool) -> None:
        self.broker = broker
        self.file = getattr(broker, "probe_file", None)
        self.pyspy = pyspy and self.file is not None and shutil.which("py-spy") is not None
        self.spy: subprocess.Popen[bytes] | None = None
        self.spy_file = None if self.file is None else self.file.with_suffix(".pyspy.txt")
        self.found: dict[str, Any] = {}

    def start(self) -> None:
        if self.file is None or self.broker.pid is None:
            return
        self.file.unlink(missing_ok=True)
        os.kill(self.broker.pid, signal.SIGUSR1)
        if self.pyspy:
            self.spy = subprocess.Popen(
                ["py-spy", "record", "--format", "raw", "--rate", "250", "--nonblocking",
                 "--threads", "--gil", "--pid", str(self.broker.pid), "-o", str(self.spy_file)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip

    def stop(self) -> None:
        if self.file is None or self.broker.pid is None:
            return
        os.kill(self.broker.pid, signal.SIGUSR2)
        if self.spy is not None:
            self.spy.send_signal(signal.SIGINT)
            self.spy.wait(60)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                self.found["probe"] = json.loads(self.file.read_text())
                break
            except (OSError, ValueError):
                time.sleep(0.05)
        if self.spy is not None and self.spy_file is not None and self.spy_file.exists():
            self.found["pyspy"] = loop_probe.summarize_pyspy(self.spy_file)

    def results(self) -> dict[str, Any]:
        return self.found


def summarise(rounds: list[dict[str, Any]], key: str, field: str) -> dict[str, Any] | None:
    values = [r[key][field] for r in rounds if field in r.get(key, {})]
    if not values:
        return None
    return {"median": _r(statistics.median(values)), "min": min(values), "max": max(values),
            "rounds": values}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["strom", "tansu"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--partitions", default="1,1000,10000",
                        help="comma-separated partition counts; the first is the reference")
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--rate", type=int, default=2000, help="msgs/s")
    parser.add_argument("--linger-ms", type=int, default=1)
    parser.add_argument("--no-warmup", action="store_true",
                        help="measure from a cold producer: no message per partition first")
    parser.add_argument("--settle", type=float, default=2.0,
                        help="seconds between creating a topic and producing to it")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--client-stats", action="store_true",
                        help="also collect librdkafka's statistics each second (rtt, queue "
                             "and output-buffer latency); at 10,000 partitions each report is "
                             "megabytes of JSON, built and parsed in the producer's thread, "
                             "and its pause lands in the ack latency")
    parser.add_argument("--probe", action="store_true",
                        help="run strom with benchmarks/loop_probe.py: loop time per request "
                             "type, loop lag, stalls, per measurement (figures change a little)")
    parser.add_argument("--pyspy", action="store_true",
                        help="with --probe: also py-spy (if installed) on the loop thread")
    parser.add_argument("--before", metavar="SRC",
                        help="also run strom from this source tree (its src directory) as "
                             "'strom_before', in each round beside the others")
    args = parser.parse_args()
    args.partitions = [int(p) for p in args.partitions.split(",")]
    env = env_info()
    tmp = workdir()
    probe_dir = loop_probe.sitecustomize_dir() if args.probe else None
    per_broker: dict[str, list[dict[str, Any]]] = {}
    skipped: dict[str, str] = {}
    try:
        for rnd in range(args.rounds):
            (tmp / f"r{rnd}").mkdir(parents=True, exist_ok=True)
            brokers, skipped = make_brokers(args.only, tmp / f"r{rnd}")
            probe = probe_dir if args.probe else None
            brokers = [StromUnderTest(tmp / f"r{rnd}", "strom", None, probe) if b.name == "strom"
                       else b for b in brokers]  # fmt: skip
            if args.before and args.only != "tansu":
                brokers.insert(1, StromUnderTest(tmp / f"r{rnd}", "strom_before", args.before,
                                                 probe))  # fmt: skip
            shift = rnd % len(brokers) if brokers else 0  # who goes first rotates by round
            brokers = brokers[shift:] + brokers[:shift]
            for broker in brokers:
                try:
                    per_broker.setdefault(broker.name, []).append(one_broker(broker, args, rnd))
                except Exception as exc:  # noqa: BLE001
                    log(traceback.format_exc())
                    per_broker.setdefault(broker.name, []).append(
                        {"error": f"{type(exc).__name__}: {exc}"[:500],
                         "log_tail": broker.log_tail()[-2000:]})  # fmt: skip
                finally:
                    broker.stop()
    finally:
        remove(tmp)
        if probe_dir is not None:
            remove(probe_dir)
    out: dict[str, Any] = {"benchmark": "partition_ack", "messages": args.messages,
                           "rate": args.rate, "linger_ms": args.linger_ms, "acks": 1,
                           "warmup_one_per_partition": not args.no_warmup,
                           "partitions": args.partitions}  # fmt: skip
    for name, rounds in per_broker.items():
        out[name] = {f"p{n}": {f: summarise(rounds, f"p{n}", f)
                               for f in ("p50_ms", "p99_ms", "max_ms", "rate_achieved",
                                         "broker_cpu_us_per_message")}
                     for n in args.partitions}  # fmt: skip
        out[name]["rounds"] = rounds
    ratios: dict[str, Any] = {}
    strom, tansu = per_broker.get("strom", []), per_broker.get("tansu", [])
    ref = args.partitions[0]

    def p99(rounds: list[dict[str, Any]], i: int, n: int) -> float | None:
        if i >= len(rounds):
            return None
        value = rounds[i].get(f"p{n}", {}).get("p99_ms")
        return float(value) if value is not None else None

    for n in args.partitions[1:]:
        own = [_ratio(p99(strom, i, n), p99(strom, i, ref)) for i in range(len(strom))]
        vs = [_ratio(p99(strom, i, n), p99(tansu, i, n)) for i in range(len(strom))]
        ratios[f"strom_p99_{n}_vs_strom_{ref}"] = _ratio_summary(own)
        if tansu:
            ratios[f"strom_p99_{n}_vs_tansu_{n}"] = _ratio_summary(vs)
            tansu_own = [_ratio(p99(tansu, i, n), p99(tansu, i, ref)) for i in range(len(tansu))]
            ratios[f"tansu_p99_{n}_vs_tansu_{ref}"] = _ratio_summary(tansu_own)
    before = per_broker.get("strom_before", [])
    for n in args.partitions if before else []:
        ratios[f"strom_p99_{n}_vs_before_{n}"] = _ratio_summary(
            [_ratio(p99(strom, i, n), p99(before, i, n)) for i in range(len(strom))])
    if tansu:
        ratios[f"strom_p99_{ref}_vs_tansu_{ref}"] = _ratio_summary(
            [_ratio(p99(strom, i, ref), p99(tansu, i, ref)) for i in range(len(strom))])
    out["ratios"] = ratios
    with contextlib.suppress(OSError):
        env["loadavg_1m_at_end"] = os.getloadavg()[0]
    env["skipped"] = skipped
    out["env"] = env
    print(json.dumps(out))
    return 0


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else round(a / b, 3)


def _ratio_summary(values: list[float | None]) -> dict[str, Any] | None:
    got = [v for v in values if v is not None]
    if not got:
        return None
    return {"median": _r(statistics.median(got)), "min": min(got), "max": max(got),
            "rounds": values}  # fmt: skip


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


if __name__ == "__main__":
    sys.exit(main())
