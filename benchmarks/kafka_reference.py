"""strom against Apache Kafka, every benchmark, alternating round by round: the strom/Kafka table.

Each suite is one of the benchmark scripts here, run with ``--only strom`` and ``--only kafka``
(a fresh broker each time: strom from this checkout, Kafka 4 in KRaft mode from the jars Maven
resolved, ``kafka_jvm.py``), the two back to back, which one first alternating from round to
round, ``--rounds`` times. Same client (confluent-kafka), same settings, same machine, minutes
apart: the load of a shared machine moves both. The 1-minute load average is recorded before
every run.

Prints JSON lines on stdout: one per figure (``metric``, ``unit``, ``better``: which direction
is good, each broker's ``median`` / ``min`` / ``max`` / ``runs``, ``ratio_rounds``: each round's
strom / Kafka, ``ratio``: their median, ``ratio_min`` / ``ratio_max``, and ``winner``), then one
``summary`` line (environment, load averages, the suites' errors). ``--markdown FILE`` also
writes the table that benchmarks/README.md shows; ``--save DIR`` keeps every run's own JSON.

    python benchmarks/kafka_reference.py                          # every suite, 3 rounds
    python benchmarks/kafka_reference.py --suites throughput,txn --rounds 5
    python benchmarks/kafka_reference.py --quick --rounds 1       # smoke run (minutes)

Suites: ``throughput`` (broker_throughput.py: produce / consume 100 B and 1 KB, Fetch on the
wire, end-to-end latency at 1,000 and 10,000 msgs/s, broker CPU per million, peak RSS,
start-up), ``compression`` (the same throughput with lz4), ``scale`` (scale.py: single-message
requests, ack latency at 1 and 1,000 partitions, Fetch CPU, 10,000 partitions: create, ack,
RSS, restart), ``cluster`` (cluster.py: RF 3 acks=all throughput, failover by kill -9 and by
SIGTERM, follower catch-up), ``groups`` (group_failover.py: rebalance after a member's
kill -9, SIGSTOP and LeaveGroup, join time, group throughput) and ``txn``
(txn_throughput.py: transactions of 100 and 1,000 records).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common import env_info, kafka_missing, log  # noqa: E402

BROKERS = ("strom", "kafka")


@dataclass(frozen=True)
class Suite:
    script: str
    args: tuple[str, ...]
    quick_args: tuple[str, ...]
    #: where a broker's figures are in the script's JSON line (cluster.py keeps strom's at the
    #: top level and Kafka's under "kafka")
    nested: bool = True

    def figures(self, out: dict[str, Any], broker: str) -> dict[str, Any] | None:
        if self.nested or broker == "kafka":
            node = out.get(broker)
            return node if isinstance(node, dict) else None
        return out


SUITES: dict[str, Suite] = {
    # a million 100-byte messages (333k of 1 KiB): enough broker CPU for 10 ms clock ticks
    "throughput": Suite("broker_throughput.py", ("--messages", "1000000", "--rate", "1000,10000"),
                        ("--quick", "--rate", "1000,10000")),
    "compression": Suite("broker_throughput.py",
                         ("--messages", "1000000", "--compression", "lz4", "--rate", "0"),
                         ("--quick", "--compression", "lz4", "--rate", "0")),
    # the 10,000 partitions in two requests of 5,000 for both brokers: Kafka's controller
    # refuses more than 10,000 metadata records in one operation (scale.py --create-chunk);
    # a long timeout: Kafka recovers 10,000 logs for minutes after a kill -9 on a busy machine
    "scale": Suite("scale.py", ("--phases", "requests,ack,fetch,partitions", "--repeat", "1",
                                "--create-chunk", "5000", "--timeout", "900"),
                   ("--quick", "--phases", "requests,ack,partitions", "--partitions", "2000")),
    "cluster": Suite("cluster.py", ("--failovers", "3", "--catchup-mb", "100"),
                     ("--quick",), nested=False),
    "groups": Suite("group_failover.py", (), ("--quick",)),
    "txn": Suite("txn_throughput.py", (), ("--messages", "20000", "--warmup", "3")),
}


@dataclass(frozen=True)
class Metric:
    name: str
    suite: str
    path: tuple[str, ...]
    unit: str
    better: str  # "higher" or "lower"


def _m(name: str, suite: str, path: str, unit: str, better: str) -> Metric:
    return Metric(name, suite, tuple(path.split(".")), unit, better)


H, L = "higher", "lower"
METRICS = [
    _m("produce_100B_msgs_per_s", "throughput", "produce_100B.msgs_per_s", "msgs/s", H),
    _m("produce_100B_mb_per_s", "throughput", "produce_100B.mb_per_s", "MB/s", H),
    _m("produce_1KB_msgs_per_s", "throughput", "produce_1KB.msgs_per_s", "msgs/s", H),
    _m("produce_1KB_mb_per_s", "throughput", "produce_1KB.mb_per_s", "MB/s", H),
    _m("consume_100B_msgs_per_s", "throughput", "consume_100B.msgs_per_s", "msgs/s", H),
    _m("consume_1KB_mb_per_s", "throughput", "consume_1KB.mb_per_s", "MB/s", H),
    _m("fetch_wire_100B_msgs_per_s", "throughput", "fetch_wire_100B.msgs_per_s", "msgs/s", H),
    _m("fetch_wire_1KB_mb_per_s", "throughput", "fetch_wire_1KB.mb_per_s", "MB/s", H),
    _m("produce_100B_cpu_s_per_M", "throughput", "produce_100B.broker_cpu_s_per_M", "CPU s/M", L),
    _m("produce_1KB_cpu_s_per_M", "throughput", "produce_1KB.broker_cpu_s_per_M", "CPU s/M", L),
    _m("consume_100B_cpu_s_per_M", "throughput", "consume_100B.broker_cpu_s_per_M", "CPU s/M", L),
    _m("e2e_p50_ms_at_1000", "throughput", "latency_1000.p50_ms", "ms", L),
    _m("e2e_p99_ms_at_1000", "throughput", "latency_1000.p99_ms", "ms", L),
    _m("e2e_p50_ms_at_10000", "throughput", "latency_10000.p50_ms", "ms", L),
    _m("e2e_p99_ms_at_10000", "throughput", "latency_10000.p99_ms", "ms", L),
    _m("ack_p99_ms_at_10000", "throughput", "latency_10000.ack_p99_ms", "ms", L),
    _m("latency_10000_cpu_s_per_M", "throughput", "latency_10000.broker_cpu_s_per_M",
       "CPU s/M", L),
    _m("peak_rss_mb", "throughput", "peak_rss_mb", "MB", L),
    _m("startup_empty_s", "throughput", "startup_s", "s", L),
    _m("lz4_produce_100B_msgs_per_s", "compression", "produce_100B.msgs_per_s", "msgs/s", H),
    _m("lz4_produce_1KB_mb_per_s", "compression", "produce_1KB.mb_per_s", "MB/s", H),
    _m("lz4_consume_100B_msgs_per_s", "compression", "consume_100B.msgs_per_s", "msgs/s", H),
    _m("lz4_consume_1KB_mb_per_s", "compression", "consume_1KB.mb_per_s", "MB/s", H),
    _m("lz4_produce_100B_cpu_s_per_M", "compression", "produce_100B.broker_cpu_s_per_M",
       "CPU s/M", L),
    _m("lz4_produce_1KB_cpu_s_per_M", "compression", "produce_1KB.broker_cpu_s_per_M",
       "CPU s/M", L),
    _m("small_requests_per_cpu_s", "scale", "requests.requests_per_cpu_s", "req/CPU s", H),
    _m("small_request_cpu_us", "scale", "requests.broker_cpu_us_per_request", "µs", L),
    _m("ack_p99_ms_1_partition", "scale", "ack_1.ack_p99_ms", "ms", L),
    _m("ack_p99_ms_1000_partitions", "scale", "ack_1000.ack_p99_ms", "ms", L),
    _m("fetch_cpu_ms_per_mib", "scale", "fetch.broker_cpu_ms_per_mib", "CPU ms/MiB", L),
    _m("create_10000_partitions_s", "scale", "many_partitions.create_topic_s", "s", L),
    _m("ack_p99_ms_10000_partitions", "scale", "many_partitions.ack_10000.ack_p99_ms", "ms", L),
    _m("raw_produce_p99_ms_10000_partitions", "scale", "many_partitions.ack_10000.raw_p99_ms",
       "ms", L),
    _m("rss_mb_per_1000_partitions", "scale", "many_partitions.rss_mb_per_1000_partitions",
       "MB", L),
    _m("restart_10000_partitions_s", "scale", "many_partitions.startup_clean_s", "s", L),
    _m("restart_after_kill9_10000_partitions_s", "scale",
       "many_partitions.startup_after_kill9_s", "s", L),
    _m("single_acks_1_msgs_per_s", "cluster", "single_acks_1.msgs_per_s", "msgs/s", H),
    _m("rf3_acks_all_msgs_per_s", "cluster", "rf3_acks_all.msgs_per_s", "msgs/s", H),
    _m("rf3_acks_all_cpu_s_per_mb", "cluster", "rf3_acks_all.broker_cpu_s_per_mb", "CPU s/MB", L),
    _m("rf3_idempotent_msgs_per_s", "cluster", "rf3_acks_all_idempotent.msgs_per_s", "msgs/s", H),
    _m("failover_kill9_s", "cluster", "failover_sigkill.median_s", "s", L),
    _m("failover_sigterm_s", "cluster", "failover_sigterm.median_s", "s", L),
    _m("follower_catch_up_mb_per_s", "cluster", "follower_catch_up.mb_per_s", "MB/s", H),
    _m("group_join_to_stable_s", "groups", "failover.sigkill.join_to_stable_s", "s", L),
    _m("group_rebalance_kill9_s", "groups", "failover.sigkill.failover_s", "s", L),
    _m("group_rebalance_sigstop_s", "groups", "failover.sigstop.failover_s", "s", L),
    _m("group_rebalance_leave_s", "groups", "failover.leave.failover_s", "s", L),
    _m("group_of_3_msgs_per_s", "groups", "throughput.group_of_3.msgs_per_s", "msgs/s", H),
    _m("idempotent_msgs_per_s", "txn", "msgs_per_s.plain", "msgs/s", H),
    _m("transactions_per_s_100_records", "txn", "transactions_per_s.txn_100", "txn/s", H),
    _m("transactions_per_s_1000_records", "txn", "transactions_per_s.txn_1000", "txn/s", H),
]


def run_script(suite: Suite, broker: str, quick: bool, timeout: float,
               save: Path | None, tag: str) -> tuple[dict[str, Any] | None, str | None]:  # fmt: skip
    """One script run for one broker: (that broker's figures, or None and the error)."""
    args = suite.quick_args if quick else suite.args
    cmd = [sys.executable, str(HERE / suite.script), "--only", broker, *args]
    log(f"$ {' '.join(cmd[1:])}")
    # a session of its own: on a timeout the script and every broker it started (its process
    # group, created here) get SIGTERM, then SIGKILL
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        for sig, grace in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            try:
                stdout, stderr = proc.communicate(timeout=grace)
                break
            except subprocess.TimeoutExpired:
                continue
        return None, f"timed out after {timeout:g} s"
    done = subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)
    if save is not None:
        (save / f"{tag}.json").write_text(done.stdout)
        (save / f"{tag}.err").write_text(done.stderr)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if done.returncode != 0 or not lines:
        return None, f"exit {done.returncode}: {done.stderr[-800:]}"
    out = json.loads(lines[-1])
    figures = suite.figures(out, broker)
    if figures is None:
        return None, f"no figures for {broker} in its output"
    if "error" in figures or "skipped" in figures:
        return None, str(figures.get("error") or figures.get("skipped"))
    return figures, None


def dig(node: Any, path: tuple[str, ...]) -> float | None:
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    return float(node) if isinstance(node, (int, float)) and not isinstance(node, bool) else None


def summarize(metric: Metric, runs: dict[str, list[float | None]]) -> dict[str, Any]:
    line: dict[str, Any] = {"metric": metric.name, "suite": metric.suite, "unit": metric.unit,
                            "better": metric.better}  # fmt: skip
    for broker in BROKERS:
        values = [v for v in runs[broker] if v is not None]
        line[broker] = {
            "median": _round(statistics.median(values)) if values else None,
            "min": _round(min(values)) if values else None,
            "max": _round(max(values)) if values else None,
            "runs": [_round(v) for v in runs[broker]],
        }
    # each round's strom / Kafka (None where a run failed): the two ran minutes apart
    rounds = [None if s is None or k is None or k == 0 else s / k
              for s, k in zip(runs["strom"], runs["kafka"], strict=True)]  # fmt: skip
    pairs = [r for r in rounds if r is not None]
    line["ratio_rounds"] = [None if r is None else round(r, 3) for r in rounds]
    line["ratio"] = round(statistics.median(pairs), 3) if pairs else None
    line["ratio_min"] = round(min(pairs), 3) if pairs else None
    line["ratio_max"] = round(max(pairs), 3) if pairs else None
    ratio = line["ratio"]
    if ratio is None:
        line["winner"] = None
    elif 0.9 <= ratio <= 1.1:
        line["winner"] = "even"  # within the ±10 % a shared machine moves a figure by
    else:
        line["winner"] = "strom" if (ratio > 1) == (metric.better == "higher") else "kafka"
    return line


def _round(value: float | None) -> float | None:
    if value is None:
        return None
    return round(value, 3 if abs(value) < 100 else 1)


def markdown(lines: list[dict[str, Any]]) -> str:
    rows = ["| figure | unit | strom (median, min-max) | Kafka (median, min-max) "
            "| strom / Kafka per round | median | better |", "|---|---|---|---|---|---|---|"]
    for ln in lines:
        s, k = ln["strom"], ln["kafka"]
        per_round = ", ".join("–" if r is None else f"{r:g}" for r in ln.get("ratio_rounds", []))
        ratio = "–" if ln["ratio"] is None else f"**{ln['ratio']:g}**"
        rows.append(f"| {ln['metric']} | {ln['unit']} | {_cell(s)} | {_cell(k)} | "
                    f"{per_round or '–'} | {ratio} | {ln['winner'] or '–'} |")  # fmt: skip
    return "\n".join(rows) + "\n"


def _cell(stats: dict[str, Any]) -> str:
    if stats["median"] is None:
        return "–"
    return f"{_num(stats['median'])} ({_num(stats['min'])}-{_num(stats['max'])})"


def _num(value: float) -> str:
    """3 significant digits below 1,000; whole numbers above (no 3e+06 in a table)."""
    return f"{value:.0f}" if abs(value) >= 1000 else f"{value:g}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suites", default=",".join(SUITES),
                        help=f"comma-separated subset of {','.join(SUITES)}")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="each script's smoke-run sizes")
    parser.add_argument("--timeout", type=float, default=3600.0, help="per script run, seconds")
    parser.add_argument("--save", type=Path, help="keep every run's JSON line and stderr here")
    parser.add_argument("--markdown", type=Path, help="write the table as Markdown here")
    args = parser.parse_args()
    suites = [s.strip() for s in args.suites.split(",") if s.strip()]
    unknown = set(suites) - set(SUITES)
    if unknown:
        parser.error(f"unknown suite(s) {sorted(unknown)}; known: {', '.join(SUITES)}")
    reason = kafka_missing()
    if reason is not None:
        print(json.dumps({"summary": True, "error": f"Apache Kafka unavailable: {reason}"}))
        return 1
    if args.save is not None:
        args.save.mkdir(parents=True, exist_ok=True)

    runs: dict[str, dict[str, list[float | None]]] = {
        m.name: {b: [] for b in BROKERS} for m in METRICS if m.suite in suites
    }
    loads: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    started = time.monotonic()
    for rnd in range(args.rounds):
        order = BROKERS if rnd % 2 == 0 else BROKERS[::-1]
        for name in suites:
            suite = SUITES[name]
            for broker in order:
                load = os.getloadavg()[0]
                t0 = time.monotonic()
                figures, error = run_script(suite, broker, args.quick, args.timeout, args.save,
                                            f"r{rnd + 1}-{name}-{broker}")  # fmt: skip
                loads.append({"round": rnd + 1, "suite": name, "broker": broker,
                              "loadavg_1m": round(load, 2),
                              "seconds": round(time.monotonic() - t0, 1)})  # fmt: skip
                if error is not None:
                    errors.append({"round": rnd + 1, "suite": name, "broker": broker,
                                   "error": error[-1000:]})  # fmt: skip
                    log(f"round {rnd + 1} {name} {broker}: {error[-300:]}")
                for metric in METRICS:
                    if metric.suite == name:
                        value = None if figures is None else dig(figures, metric.path)
                        runs[metric.name][broker].append(value)
            log(f"round {rnd + 1} {name}: done ({time.monotonic() - started:.0f} s so far)")
    lines = [summarize(m, runs[m.name]) for m in METRICS if m.name in runs]
    for line in lines:
        print(json.dumps(line), flush=True)
    if args.markdown is not None:
        args.markdown.write_text(markdown(lines))
    wins = {w: sum(1 for ln in lines if ln["winner"] == w) for w in ("strom", "kafka", "even")}
    env = env_info()
    print(json.dumps({
        "summary": True, "rounds": args.rounds, "suites": suites, "quick": args.quick,
        "wins": wins, "loadavg_1m": loads, "errors": errors, "env": env,
        "seconds": round(time.monotonic() - started),
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
