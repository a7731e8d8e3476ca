"""Cluster figures, each against a reference measured in the same run (issue 9's targets).

(a) Throughput: the same confluent-kafka workload produced to a single strom broker with
    ``acks=1`` (the reference) and to a 3-broker cluster, replication factor 3,
    ``min.insync.replicas=2``, ``acks=all``, the client otherwise the same:
    ``ratio_rf3_acks_all_vs_single_acks_1`` (target >= 0.5). Also measured with an idempotent
    producer on both the single node and the cluster (``*_idempotent``): librdkafka's
    idempotent mode costs the client more than replication costs the brokers.
(b) Failover: a producer (librdkafka's defaults but acks=all and idempotence; a new one each
    round, warm before the signal) sends one message at a time to partition 0; the leader is
    killed with kill -9 (``sigkill``) or stopped with SIGTERM, a controlled shutdown
    (``sigterm``). Per round: ``seconds``, from the signal to the acknowledgement of the first
    message sent after it (issue 9's figure; targets: below ``zookeeper.session.timeout.ms``
    + 2 s, and below 1 s for SIGTERM); ``leader_visible``, until a Metadata answer names the
    new leader (the brokers' part); ``producer_stall``, the longest wait for an
    acknowledgement until the new leader acknowledges (with SIGTERM the old leader still
    acknowledges for a few ms after the signal, so ``seconds`` alone misses the message
    caught in the move). docs/cluster.md (Failover time) says what each consists of.
(c) Follower catch-up: one follower stopped, ``--catchup-mb`` produced without it, started
    again; MB/s from its start (start-up included: a lower bound) to its return to the ISR.

Uses :class:`strom.testing.cluster.ClusterProcess` (ZooKeeper from Debian's package) and stops
every process by PID. Then every phase again on Apache Kafka (``kafka_jvm``: one KRaft node
and 3 combined broker/controller nodes, ``broker.session.timeout.ms`` = strom's ZooKeeper
session timeout), unless ``--only strom``: Kafka's figures under ``kafka``, strom / Kafka under
``ratios_vs_kafka``. Phases that cannot run (cluster mode, replication or the controller not
in this build) record their error and the rest still runs. Prints ONE JSON line on stdout
(progress on stderr).

    python benchmarks/cluster.py [--quick] [--only strom|kafka] [--messages N] [--size B] [--failovers K]
                                 [--phases throughput,sigkill,sigterm,catchup]
                                 [--repeat N] [--profile DIR] [--keep-logs DIR] [--client-debug]

``--phases`` also takes ``a`` (throughput), ``b`` (sigkill and sigterm) and ``c`` (catchup).
``--repeat N`` measures the throughput phase N times, the single node and the cluster back to
back each round (both kept running), and reports the median of the rounds' ratios: on a
machine shared with other work, the load changes between runs. ``--profile DIR`` records each
broker of the throughput phase with py-spy (``DIR/<name>.txt``, py-spy's raw collapsed stacks:
one stack and its sample count a line) while it produces. Each throughput run also reports
the CPU seconds its brokers used (``broker_cpu_s``) and that per MB produced: the cluster's
brokers share the machine's cores with each other and with the client, so CPU per replicated
byte is what limits it.

``--keep-logs`` copies every broker's log (INFO, millisecond timestamps) to DIR; each failover
round's signal is printed on stderr with its wall-clock time so the logs can be lined up with
it. ``--client-debug`` writes the pinging producer's librdkafka debug log (metadata, broker,
msg, topic) with wall-clock timestamps to DIR/client.log (needs ``--keep-logs``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    cpu_seconds,
    create_topic,
    env_info,
    kafka_missing,
    log,
    ratio,
    remove,
    workdir,
)
from confluent_kafka import Producer  # noqa: E402

from strom.testing import BrokerProcess  # noqa: E402
from strom.testing.cluster import ClusterProcess  # noqa: E402

SESSION_TIMEOUT_MS = 6000
PARTITIONS = 3
PHASES = ("throughput", "sigkill", "sigterm", "catchup")


class _Quiet:
    def log(self, *_args: object, **_kwargs: object) -> None:
        pass


def produce_rate(bootstrap: str, topic: str, count: int, size: int, acks: str,
                 idempotent: bool) -> dict[str, Any]:  # fmt: skip
    """Produce ``count`` messages of ``size`` bytes as fast as the client goes; msgs/s."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5,
                         "enable.idempotence": idempotent, "logger": _Quiet()})  # fmt: skip
    state = {"ok": 0, "err": 0}

    def on_delivery(err: Any, _msg: Any) -> None:
        state["err" if err else "ok"] += 1

    value = b"x" * size
    start = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    producer.flush(120)
    elapsed = time.perf_counter() - start
    return {"acked": state["ok"], "errors": state["err"], "seconds": round(elapsed, 3),
            "msgs_per_s": round(state["ok"] / elapsed, 1),
            "mb_per_s": round(state["ok"] * size / elapsed / 1e6, 3)}  # fmt: skip


@contextlib.contextmanager
def profiled(pids: dict[str, int | None], profile_dir: Path | None) -> Any:
    """py-spy (raw collapsed stacks) on each of ``pids`` while the block runs, when asked;
    always yields a dict filled on exit with each process's CPU seconds during the block."""
    spies: list[subprocess.Popen[bytes]] = []
    if profile_dir is not None:
        profile_dir.mkdir(parents=True, exist_ok=True)
        for name, pid in pids.items():
            if pid is not None:
                spies.append(subprocess.Popen(
                    ["py-spy", "record", "--format", "raw", "--rate", "100", "--nonblocking",
                     "-o", str(profile_dir / f"{name}.txt"), "--pid", str(pid)],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))  # fmt: skip
        time.sleep(1.0)  # py-spy attaches
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    used: dict[str, float | None] = {}
    try:
        yield used
    finally:
        for name, pid in pids.items():
            after, start = cpu_seconds(pid), before[name]
            used[name] = None if after is None or start is None else round(after - start, 2)
        for spy in spies:
            with contextlib.suppress(ProcessLookupError):
                os.kill(spy.pid, signal.SIGINT)  # py-spy writes its file on SIGINT
        for spy in spies:
            try:
                spy.wait(30)
            except subprocess.TimeoutExpired:
                os.kill(spy.pid, signal.SIGKILL)
                spy.wait(10)


def measured_rate(pids: dict[str, int | None], profile_dir: Path | None, bootstrap: str,
                  args: argparse.Namespace, acks: str, idempotent: bool) -> dict[str, Any]:  # fmt: skip
    """:func:`produce_rate` with the brokers' CPU seconds (and their profiles, if asked)."""
    with profiled(pids, profile_dir) as cpu:
        result = produce_rate(bootstrap, "bench", args.messages, args.size, acks, idempotent)
    known = [v for v in cpu.values() if v is not None]
    mb = result["acked"] * args.size / 1e6
    result["broker_cpu_s"] = cpu
    if known and mb:
        result["broker_cpu_s_per_mb"] = round(sum(known) / mb, 3)
    return result


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median run (by msgs/s), with every run's msgs/s when there are several."""
    ok = [r for r in runs if "msgs_per_s" in r]
    if not ok:
        return runs[-1]
    best = sorted(ok, key=lambda r: r["msgs_per_s"])[(len(ok) - 1) // 2]
    if len(runs) > 1:
        best = dict(best, runs_msgs_per_s=[r.get("msgs_per_s") for r in runs])
    return best


#: the throughput runs of one round: (result key, on the cluster?, acks, idempotence). The
#: issue's figure compares the same client workload with only ``acks`` changed; the idempotent
#: pair shows what librdkafka's idempotent mode (5 requests in flight, more client CPU per
#: message) costs on top, on the single node as on the cluster.
RUNS = (("single_acks_1", False, "1", False), ("rf3_acks_all", True, "all", False),
        ("single_acks_all_idempotent", False, "all", True),
        ("rf3_acks_all_idempotent", True, "all", True))  # fmt: skip
RATIOS = {"ratio_rf3_acks_all_vs_single_acks_1": ("rf3_acks_all", "single_acks_1"),
          "ratio_rf3_idempotent_vs_single_acks_1": ("rf3_acks_all_idempotent", "single_acks_1"),
          "ratio_rf3_idempotent_vs_single_idempotent": ("rf3_acks_all_idempotent",
                                                        "single_acks_all_idempotent")}  # fmt: skip


def throughput(args: argparse.Namespace, single: BrokerProcess, cluster: ClusterProcess,
               result: dict[str, Any]) -> None:  # fmt: skip
    """Phase (a): ``--repeat`` rounds, each every run of :data:`RUNS` back to back; each ratio
    of :data:`RATIOS` is the median of the rounds' ratios (a round's runs see the same load of
    a shared machine)."""
    create_topic(single.bootstrap, "bench", PARTITIONS)
    cluster.create_topic("bench", PARTITIONS, 3, {"min.insync.replicas": "2"})
    if args.warmup_messages:
        # untimed: a JVM broker runs interpreted until its hot paths are compiled
        for bootstrap, acks in ((single.bootstrap, "1"), (cluster.bootstrap, "all")):
            produce_rate(bootstrap, "bench", args.warmup_messages, args.size, acks, False)
    cluster_pids = {f"broker-{i}": b.pid for i, b in sorted(cluster.brokers.items())}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, *_ in RUNS}
    per_round: dict[str, list[float]] = {name: [] for name in RATIOS}
    for r in range(args.repeat):
        suffix = f"-{r + 1}" if args.repeat > 1 else ""
        for name, on_cluster, acks, idempotent in RUNS:
            log(f"{name}{suffix}")
            profile = args.profile / f"{name}{suffix}" if args.profile else None
            pids = cluster_pids if on_cluster else {"single": single.pid}
            bootstrap = cluster.bootstrap if on_cluster else single.bootstrap
            runs[name].append(measured_rate(pids, profile, bootstrap, args, acks, idempotent))
        for key, (num, den) in RATIOS.items():
            pair = ratio(runs[num][-1].get("msgs_per_s"), runs[den][-1].get("msgs_per_s"))
            if pair is not None:
                per_round[key].append(pair)
    for name, measured in runs.items():
        result[name] = median_run(measured)
    for key, values in per_round.items():
        result[key] = round(statistics.median(values), 3) if values else None
        if args.repeat > 1:
            result[f"{key}_per_round"] = values


def client_logger(path: Path) -> logging.Logger:
    """librdkafka's debug lines to ``path``, each with its wall-clock time (milliseconds)."""
    logger = logging.getLogger(f"bench.librdkafka.{path}")
    if logger.handlers:
        return logger
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    return logger


class Pinger:
    """One message at a time to partition 0 (acks=all); records each acknowledgement's time.

    The producer's settings are a normal user's (librdkafka's defaults but for acks=all,
    idempotence and a long message timeout): whatever the client adds to a failover is part
    of what a user sees."""

    def __init__(self, bootstrap: str, topic: str, debug_log: Path | None = None) -> None:
        conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "acks": "all",
                                "linger.ms": 0, "enable.idempotence": True,
                                "message.timeout.ms": 120000, "logger": _Quiet()}  # fmt: skip
        if debug_log is not None:
            conf["logger"] = client_logger(debug_log)
            conf["debug"] = "metadata,broker,msg,topic,protocol"
        self.producer = Producer(conf)
        self.topic = topic
        self.acks: list[tuple[float, float]] = []  # (sent, acknowledged), monotonic
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            sent = time.monotonic()
            done = threading.Event()

            def on_delivery(err: Any, _msg: Any, sent: float = sent, done: Any = done) -> None:
                if err is None:
                    self.acks.append((sent, time.monotonic()))
                done.set()

            self.producer.produce(self.topic, b"ping", partition=0, on_delivery=on_delivery)
            while not done.is_set() and not self._stop.is_set():
                self.producer.poll(0.01)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def longest_wait(self, t0: float, t1: float) -> float:
        """The longest a message waited for its acknowledgement (counted from ``t0`` at the
        earliest) among those acknowledged between ``t0`` and ``t1``: how long the producer
        was stalled, even when the old leader still acknowledged right after the signal."""
        waits = [acked - max(sent, t0) for sent, acked in list(self.acks) if t0 < acked <= t1]
        return max(waits, default=t1 - t0)

    def first_ack_after(self, t0: float, timeout: float) -> float | None:
        """Seconds from ``t0`` to the acknowledgement of the first message sent after it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for sent, acked in list(self.acks):
                if sent >= t0:
                    return acked - t0
            time.sleep(0.01)
        return None


def wall_clock() -> str:
    """Now as the brokers' log lines show it (local time, milliseconds)."""
    now = time.time()
    return time.strftime("%H:%M:%S", time.localtime(now)) + f",{int(now * 1000) % 1000:03d}"


def leader_visible_after(
    cluster: ClusterProcess, topic: str, old: int, t0: float, out: list[float | None]
) -> None:
    """Seconds from ``t0`` until a Metadata answer names a leader other than ``old`` (asked
    every 20 ms): the brokers' part of a failover, without the producer's own delays."""
    deadline = t0 + 60
    while time.monotonic() < deadline:
        try:
            state = cluster.partition_state(topic, 0)
        except Exception:  # noqa: BLE001 - a broker may be between states
            state = None
        if state is not None and state.leader >= 0 and state.leader != old:
            out.append(time.monotonic() - t0)
            return
        time.sleep(0.02)
    out.append(None)


def summary(values: list[float | None]) -> dict[str, Any]:
    measured = [t for t in values if t is not None]
    return {"seconds": [None if t is None else round(t, 3) for t in values],
            "median_s": round(statistics.median(measured), 3) if measured else None,
            "max_s": round(max(measured), 3) if measured else None}  # fmt: skip


def failover(
    cluster: ClusterProcess, how: str, rounds: int, debug_log: Path | None = None
) -> dict[str, Any]:
    """``rounds`` times: signal the partition's leader, time the first acknowledgement of a
    message sent after the signal (``seconds``, issue 9's figure), the first Metadata answer
    naming the new leader (``leader_visible``, the brokers' part) and the longest wait for an
    acknowledgement until the new leader acknowledges (``producer_stall``: with SIGTERM the
    old leader acknowledges until its controlled shutdown moves the leadership, so
    ``seconds`` alone can miss the message caught in the move); then start the broker again
    and wait for a full ISR."""
    topic = f"failover-{how}"
    cluster.create_topic(topic, 1, 3, {"min.insync.replicas": "2"})
    times: list[float | None] = []
    visible: list[float | None] = []
    stalls: list[float | None] = []
    was_controller: list[bool] = []
    for i in range(rounds):
        cluster.wait_for_isr(topic, 0, {1, 2, 3}, timeout=120)
        leader = cluster.leader_of(topic, 0)
        # A producer per round: librdkafka's reconnect backoff to the broker restarted in the
        # round before (up to reconnect.backoff.max.ms, 10 s) would otherwise be measured
        # when that broker becomes the leader again (seen: 5.4 and 7.0 s stalls).
        pinger = Pinger(cluster.bootstrap, topic, debug_log)
        pinger.start()
        try:
            # warm: connected to this leader, producer id known (else the round measures the
            # client's start-up, not a failover)
            if pinger.first_ack_after(time.monotonic(), timeout=60) is None:
                raise RuntimeError("the producer gets no acknowledgement before the fault")
            was_controller.append(cluster.controller_id() == leader)
            t0 = time.monotonic()
            log(f"{how} round {i + 1}: leader {leader} (controller: {was_controller[-1]}), "
                f"signal at {wall_clock()}")  # fmt: skip
            if how == "sigkill":
                cluster.kill(leader)
            else:
                threading.Thread(target=cluster.stop, args=(leader,), daemon=True).start()
            watcher = threading.Thread(target=leader_visible_after,
                                       args=(cluster, topic, leader, t0, visible))  # fmt: skip
            watcher.start()
            times.append(pinger.first_ack_after(t0, timeout=60))
            watcher.join(70)
            seen = visible[-1]
            after = None if seen is None else pinger.first_ack_after(t0 + seen, timeout=60)
            stalls.append(None if after is None or seen is None
                          else pinger.longest_wait(t0, t0 + seen + after))  # fmt: skip
            log(f"{how} round {i + 1}: new leader visible after {seen} s, first ack after "
                f"{times[-1]} s, producer stalled {stalls[-1]} s")  # fmt: skip
        finally:
            pinger.stop()
        while cluster.broker(leader).pid is not None and how == "sigterm":
            time.sleep(0.05)  # the controlled shutdown completes before restarting
        cluster.start_broker(leader)
    return {"rounds": rounds, **summary(times), "leader_visible": summary(visible),
            "producer_stall": summary(stalls),
            "leader_was_controller": was_controller}  # fmt: skip


def catch_up(cluster: ClusterProcess, megabytes: int) -> dict[str, Any]:
    topic = "catchup"
    cluster.create_topic(topic, 1, 3, {"min.insync.replicas": "2"})
    leader = cluster.leader_of(topic, 0)
    follower = next(i for i in sorted(cluster.brokers) if i != leader)
    cluster.stop(follower)
    cluster.wait_for_isr(topic, 0, {1, 2, 3} - {follower}, timeout=120)
    size = 10_000
    count = megabytes * 1_000_000 // size
    produced = produce_rate(cluster.bootstrap, topic, count, size, "all", False)
    # from before the start: the follower may fetch before start_broker returns (it waits for
    # the listener), so the rate counts its start-up too (a lower bound)
    t0 = time.monotonic()
    cluster.start_broker(follower)
    cluster.wait_for_isr(topic, 0, {1, 2, 3}, timeout=600)
    seconds = time.monotonic() - t0
    mb = produced["acked"] * size / 1e6
    return {"megabytes": round(mb, 1), "seconds": round(seconds, 3),
            "mb_per_s": round(mb / seconds, 3)}  # fmt: skip


def phase(result: dict[str, Any], name: str, call: Any) -> None:
    try:
        result[name] = call()
    except Exception as exc:  # noqa: BLE001 - record it, run the other phases
        log(f"{name} failed: {exc!r}")
        traceback.print_exc(file=sys.stderr)
        result[name] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"}


def strom_pair(base: Path) -> tuple[Any, Any]:
    """strom: one broker, and a 3-broker cluster with ZooKeeper (session 6 s)."""
    return (BrokerProcess(base / "single" / "data"),
            ClusterProcess(base / "cluster", brokers=3, session_timeout_ms=SESSION_TIMEOUT_MS))


def kafka_pair(base: Path) -> tuple[Any, Any]:
    """Apache Kafka: one KRaft node, and 3 nodes (each broker and controller) whose broker
    session timeout is strom's ZooKeeper session timeout, so kill -9 is detected in the same
    6 s (Kafka's default is 9 s)."""
    from kafka_jvm import KafkaCluster, KafkaNode  # noqa: PLC0415

    session = {"broker.session.timeout.ms": str(SESSION_TIMEOUT_MS)}
    return (KafkaNode(base / "single"),
            KafkaCluster(base / "cluster", brokers=3, settings=session))


def run_system(args: argparse.Namespace, phases: set[str], base: Path, result: dict[str, Any],
               make: Any) -> None:  # fmt: skip
    """Every phase of ``phases`` on one system (strom or Kafka), into ``result``."""
    debug = args.keep_logs / "client.log" if args.client_debug else None
    single, cluster = make(base)
    if "throughput" not in phases:
        single = None
    try:
        if single is not None:
            phase(result, "single_start", lambda: {"ok": bool(single.start())})
        phase(result, "cluster_start", lambda: {"ok": bool(cluster.start(180))})
        if "error" not in result["cluster_start"]:
            if single is not None and "error" not in result["single_start"]:
                phase(result, "throughput", lambda: throughput(args, single, cluster, result))
                if result["throughput"] is None:
                    del result["throughput"]
            for how in ("sigkill", "sigterm"):
                if how in phases:
                    phase(result, f"failover_{how}",
                          lambda how=how: failover(cluster, how, args.failovers, debug))  # fmt: skip
            if "catchup" in phases:
                phase(result, "follower_catch_up", lambda: catch_up(cluster, args.catchup_mb))
    finally:
        cluster.close()
        if args.keep_logs is not None:
            for broker_id, broker in cluster.brokers.items():
                if broker.log_file.exists():
                    shutil.copy(broker.log_file,
                                args.keep_logs / f"{base.name}-broker-{broker_id}.log")
        if single is not None:
            single.stop()


def ratios_vs_kafka(strom: dict[str, Any], kafka: dict[str, Any]) -> dict[str, float | None]:
    def get(d: dict[str, Any], *path: str) -> Any:
        for key in path:
            d = d.get(key) if isinstance(d, dict) else None  # type: ignore[assignment]
        return d

    out: dict[str, float | None] = {}
    for name, *_ in RUNS:
        out[f"{name}_msgs_per_s"] = ratio(get(strom, name, "msgs_per_s"),
                                          get(kafka, name, "msgs_per_s"))
        out[f"{name}_cpu_per_mb"] = ratio(get(strom, name, "broker_cpu_s_per_mb"),
                                          get(kafka, name, "broker_cpu_s_per_mb"))
    for how in ("sigkill", "sigterm"):
        out[f"failover_{how}_median_s"] = ratio(get(strom, f"failover_{how}", "median_s"),
                                                get(kafka, f"failover_{how}", "median_s"))
    out["follower_catch_up_mb_per_s"] = ratio(get(strom, "follower_catch_up", "mb_per_s"),
                                              get(kafka, "follower_catch_up", "mb_per_s"))
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small workload (a smoke run)")
    p.add_argument("--messages", type=int, default=200_000, help="messages per throughput run")
    p.add_argument("--size", type=int, default=100, help="message size in bytes")
    p.add_argument("--failovers", type=int, default=3, help="rounds of each failover kind")
    p.add_argument("--catchup-mb", type=int, default=200, help="MB a follower must catch up")
    p.add_argument(
        "--phases",
        default=",".join(PHASES),
        help=f"comma-separated subset of {','.join(PHASES)} or of a,b,c (default: all)",
    )
    p.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="rounds of the throughput phase, single node and cluster back to back",
    )
    p.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="directory for py-spy profiles of the throughput phase's brokers",
    )
    p.add_argument("--warmup-messages", type=int, default=100_000,
                   help="untimed messages produced to the single node and the cluster first")
    p.add_argument("--keep-logs", type=Path, help="copy the brokers' logs to this directory")
    p.add_argument("--only", choices=("strom", "kafka"),
                   help="one system (default: strom, then Apache Kafka when java and mvn are"
                        " there; strom's figures stay at the top level, Kafka's under 'kafka')")
    p.add_argument(
        "--client-debug",
        action="store_true",
        help="librdkafka debug log of the failover producer (with --keep-logs)",
    )
    args = p.parse_args()
    aliases = {"a": ["throughput"], "b": ["sigkill", "sigterm"], "c": ["catchup"]}
    phases = {y for x in args.phases.split(",") if x.strip()
              for y in aliases.get(x.strip(), [x.strip()])}  # fmt: skip
    if phases - set(PHASES):
        p.error(f"unknown phase(s) {sorted(phases - set(PHASES))}; known: {', '.join(PHASES)}")
    if args.client_debug and args.keep_logs is None:
        p.error("--client-debug needs --keep-logs")
    if args.keep_logs is not None:
        args.keep_logs.mkdir(parents=True, exist_ok=True)
    if args.quick:
        args.messages, args.failovers, args.catchup_mb = 20_000, 1, 20
        args.warmup_messages = 0
    base = workdir()
    result: dict[str, Any] = {"benchmark": "cluster", "env": env_info(),
                              "messages": args.messages, "size": args.size}  # fmt: skip
    try:
        if args.only in (None, "strom"):
            log("strom: a single broker and a 3-broker cluster (ZooKeeper)")
            run_system(args, phases, base / "strom", result, strom_pair)
        if args.only in (None, "kafka"):
            reason = kafka_missing()
            if reason is not None:
                result["kafka"] = {"skipped": reason}
            else:
                log("kafka: a single node and a 3-node KRaft cluster")
                result["kafka"] = {}
                run_system(args, phases, base / "kafka", result["kafka"], kafka_pair)
                result["ratios_vs_kafka"] = ratios_vs_kafka(result, result["kafka"])
        result["targets"] = {
            "ratio_rf3_acks_all_vs_single_acks_1": ">= 0.5",
            "failover_sigkill_max_s": f"< {SESSION_TIMEOUT_MS / 1000 + 2:g}",
            "failover_sigterm_max_s": "< 1",
        }
    finally:
        remove(base)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
