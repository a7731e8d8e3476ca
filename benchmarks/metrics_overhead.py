"""What metrics cost: broker CPU per million messages with the admin listener scraped every
second against the admin listener off, same run.

Two kinds of strom broker from this tree: ``off`` (``--admin-listener=``) and ``scraped`` (an
admin listener, ``GET /metrics`` every ``--scrape-interval`` seconds by a thread of this
script while it runs). Each round starts a fresh broker of each kind (a process's own bias,
its core, its allocator's history, was as large as the effect measured when the same two
processes served every round) and runs the same workload against each in turn, the order
alternating between rounds, so drift on a shared machine hits both:

- ``produce``: ``--messages`` 100-byte values, ``linger.ms=5`` (batched), 1 partition;
- ``requests``: ``--requests`` 100-byte values one per Produce request (``linger.ms=0``,
  ``batch.num.messages=1``): the per-request cost, where hot-path counters would show;
- ``consume``: the ``produce`` data read back by a Consumer from the beginning.

The figure is the broker process's CPU (utime+stime, ``/proc/<pid>/stat``) during the phase
per million messages; the median over rounds is reported with ``ratios`` scraped / off
(target: within 5 %, i.e. <= 1.05); ``all`` is the three phases together (CPU summed over
messages summed), the steadiest figure (the consume phase alone is a few clock ticks). An
idle phase (``--idle-seconds``, no clients) gives the CPU of one scrape: the difference
between the two brokers' CPU over the scrapes made meanwhile (``scrape_cpu_ms``). The counters themselves run in both brokers: to see their
cost, ``--baseline-src DIR`` adds a third broker started from another source tree (e.g. the
commit before metrics: ``git worktree add /tmp/base <commit>`` then ``--baseline-src
/tmp/base/src``) and ``ratios`` gains ``off / baseline``. Prints ONE JSON line on stdout.

    python benchmarks/metrics_overhead.py [--quick] [--rounds 3] [--baseline-src DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
import traceback
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import cpu_seconds, create_topic, env_info, log, ratio, remove, workdir  # noqa: E402
from broker_throughput import consume, produce  # noqa: E402
from confluent_kafka import KafkaError, Producer  # noqa: E402

from strom.testing import BrokerProcess  # noqa: E402

SIZE = 100
PHASES = ("produce", "requests", "consume")
REPORTED = (*PHASES, "all")


class BaselineBroker(BrokerProcess):
    """A broker started from another source tree (which may not know --admin-listener)."""

    def __init__(self, data_dir: Path, src: str) -> None:
        super().__init__(data_dir)
        self.src = src

    def command(self) -> list[str]:
        return [arg for arg in super().command() if not arg.startswith("--admin-listener")]

    def start(self, timeout: float = 30.0) -> BaselineBroker:
        saved = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = self.src
        try:
            super().start(timeout)
        finally:
            if saved is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = saved
        return self


class Scraper(threading.Thread):
    """GET /metrics every ``interval`` seconds until stopped; counts scrapes and failures."""

    def __init__(self, url: str, interval: float) -> None:
        super().__init__(daemon=True)
        self.url, self.interval = url, interval
        self.scrapes = self.failures = self.bytes = 0
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.wait(self.interval):
            try:
                with urllib.request.urlopen(self.url, timeout=10) as response:
                    self.bytes = len(response.read())
                self.scrapes += 1
            except OSError:
                self.failures += 1


def one_per_request(bootstrap: str, topic: str, count: int, timeout: float) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.num.messages": 1,
                         "acks": 1, "queue.buffering.max.messages": 1_000_000})  # fmt: skip
    failed = [0]

    def on_delivery(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            failed[0] += 1

    value = b"r" * SIZE
    for _ in range(count):
        producer.produce(topic, value, partition=0, on_delivery=on_delivery)
        producer.poll(0)
    if producer.flush(timeout) or failed[0]:
        raise RuntimeError(f"requests: {failed[0]} failed or not all delivered")


def run_round(broker: BrokerProcess, name: str, rnd: int, args: argparse.Namespace) -> dict[str, float]:
    """CPU seconds per million messages of each phase against ``broker``."""
    out: dict[str, float] = {}
    topic = f"overhead-{name}-{rnd}"
    create_topic(broker.bootstrap, topic, 1)
    for phase in PHASES:
        before = cpu_seconds(broker.pid)
        if phase == "produce":
            produce(broker.bootstrap, topic, args.messages, SIZE, 1, args.timeout)
            count = args.messages
        elif phase == "requests":
            one_per_request(broker.bootstrap, f"{topic}-r", args.requests, args.timeout)
            count = args.requests
        else:
            consume(broker.bootstrap, topic, args.messages, SIZE, 1, args.timeout)
            count = args.messages
        after = cpu_seconds(broker.pid)
        if before is None or after is None:
            raise RuntimeError(f"cannot read the CPU time of {name}")
        out[phase] = (after - before) * 1e6 / count
        out[f"{phase}_cpu_s"] = after - before
        out[f"{phase}_messages"] = count
    out["all"] = (sum(out[f"{p}_cpu_s"] for p in PHASES) * 1e6
                  / sum(out[f"{p}_messages"] for p in PHASES))  # fmt: skip
    return {k: v for k, v in out.items() if k in PHASES or k == "all"}


def idle_scrape_cost(brokers: dict[str, BrokerProcess], scraper: Scraper,
                     seconds: float) -> float | None:  # fmt: skip
    """CPU milliseconds of one scrape: scraped minus off over an idle window."""
    cpu0 = {n: cpu_seconds(brokers[n].pid) for n in ("off", "scraped")}
    scrapes0 = scraper.scrapes
    time.sleep(seconds)
    cpu1 = {n: cpu_seconds(brokers[n].pid) for n in ("off", "scraped")}
    scrapes = scraper.scrapes - scrapes0
    if None in cpu0.values() or None in cpu1.values() or not scrapes:
        return None
    extra = (cpu1["scraped"] - cpu0["scraped"]) - (cpu1["off"] - cpu0["off"])  # type: ignore[operator]
    return round(extra * 1000 / scrapes, 2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--scrape-interval", type=float, default=1.0)
    parser.add_argument("--baseline-src", help="source tree (its src/) of a baseline broker")
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--timeout", type=float, default=180.0)
    parser.add_argument("--quick", action="store_true", help="10x smaller counts, 1 round")
    args = parser.parse_args()
    if args.quick:
        args.messages, args.requests, args.rounds = args.messages // 10, args.requests // 10, 1
        args.idle_seconds = 3.0
    base = workdir()
    result: dict[str, Any] = {"benchmark": "metrics_overhead", "env": env_info(),
                              "messages": args.messages, "requests": args.requests,
                              "rounds": args.rounds, "scrape_interval_s": args.scrape_interval}
    def make(name: str, rnd: int) -> BrokerProcess:
        data = base / f"{name}-{rnd}" / "data"
        if name == "baseline":
            return BaselineBroker(data, args.baseline_src)
        return BrokerProcess(data, admin=name == "scraped")

    names = ["off", "scraped"] + (["baseline"] if args.baseline_src else [])
    brokers: dict[str, BrokerProcess] = {}
    scrapes = {"done": 0, "failed": 0, "last_bytes": 0}
    samples: dict[str, dict[str, list[float]]] = {n: {p: [] for p in REPORTED} for n in names}
    try:
        for rnd in range(args.rounds):
            brokers = {name: make(name, rnd).start() for name in names}
            scraper = Scraper(f"{brokers['scraped'].admin_url}/metrics", args.scrape_interval)
            scraper.start()
            try:
                if rnd == 0:
                    log(f"idle: {args.idle_seconds}s")
                    result["scrape_cpu_ms"] = idle_scrape_cost(brokers, scraper,
                                                               args.idle_seconds)  # fmt: skip
                order = names if rnd % 2 == 0 else names[::-1]
                for name in order:
                    log(f"round {rnd + 1}/{args.rounds}: {name}")
                    for phase, value in run_round(brokers[name], name, rnd, args).items():
                        samples[name][phase].append(value)
            finally:
                scraper.halt.set()
                scraper.join(15)
                scrapes["done"] += scraper.scrapes
                scrapes["failed"] += scraper.failures
                scrapes["last_bytes"] = scraper.bytes or scrapes["last_bytes"]
                for broker in brokers.values():
                    broker.stop()
        result["cpu_s_per_M"] = {
            name: {phase: round(statistics.median(v), 3) for phase, v in phases.items()}
            for name, phases in samples.items()
        }  # fmt: skip
        result["cpu_s_per_M_all_rounds"] = {
            name: {phase: [round(x, 3) for x in v] for phase, v in phases.items()}
            for name, phases in samples.items()
        }  # fmt: skip
        med = result["cpu_s_per_M"]
        ratios = {f"scraped/off {p}": ratio(med["scraped"][p], med["off"][p]) for p in REPORTED}
        if "baseline" in med:
            ratios.update({f"off/baseline {p}": ratio(med["off"][p], med["baseline"][p])
                           for p in REPORTED})  # fmt: skip
        # the same ratio per round (both brokers measured back to back), then the median:
        # less sensitive to the machine's load drifting between rounds
        for other, ref in (("scraped", "off"), ("baseline", "off")):
            if other not in samples:
                continue
            for p in REPORTED:
                pairs = [a / b for a, b in zip(samples[other][p], samples[ref][p], strict=True)
                         if b]  # fmt: skip
                key = f"{other}/{ref} {p} paired" if other == "scraped" else f"off/baseline {p} paired"
                value = statistics.median(pairs) if pairs else None
                if other == "baseline" and value:
                    value = 1 / value
                ratios[key] = None if value is None else round(value, 3)
        result["ratios"] = ratios
        result["scrapes"] = scrapes
    except Exception as exc:  # a failed run says so; it never invents a figure
        result["error"] = f"{type(exc).__name__}: {exc}"
        result["traceback_tail"] = traceback.format_exc().splitlines()[-3:]
        result["log_tails"] = {n: b.log_tail(10) for n, b in brokers.items()}
    finally:
        for broker in brokers.values():
            broker.stop()
        remove(base)
    print(json.dumps(result), flush=True)
    return 1 if "error" in result else 0


if __name__ == "__main__":
    sys.exit(main())
