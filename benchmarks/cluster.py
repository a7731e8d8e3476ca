"""Cluster figures, each against a reference measured in the same run (issue 9's targets).

(a) Throughput: the same confluent-kafka workload produced to a single strom broker with
    ``acks=1`` (the reference) and to a 3-broker cluster, replication factor 3,
    ``min.insync.replicas=2``, ``acks=all``: ``ratio_rf3_acks_all_vs_single_acks_1``
    (target >= 0.5).
(b) Failover: a producer sends one message at a time (acks=all) to partition 0; the leader is
    killed with kill -9 (``sigkill``) or stopped with SIGTERM, a controlled shutdown
    (``sigterm``); we time from the signal to the first acknowledgement of a message sent
    after it. Targets: below ``zookeeper.session.timeout.ms`` + 2 s, and below 1 s for SIGTERM.
(c) Follower catch-up: one follower stopped, ``--catchup-mb`` produced without it, started
    again; MB/s from its listening again to its return to the ISR.

Uses :class:`strom.testing.cluster.ClusterProcess` (ZooKeeper from Debian's package) and stops
every process by PID. Phases that cannot run (cluster mode, replication or the controller not
in this build) record their error and the rest still runs. Prints ONE JSON line on stdout
(progress on stderr).

    python benchmarks/cluster.py [--quick] [--messages N] [--size B] [--failovers K]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import create_topic, env_info, log, ratio, remove, workdir  # noqa: E402
from confluent_kafka import Producer  # noqa: E402

from strom.testing import BrokerProcess  # noqa: E402
from strom.testing.cluster import ClusterProcess  # noqa: E402

SESSION_TIMEOUT_MS = 6000
PARTITIONS = 3


class _Quiet:
    def log(self, *_args: object, **_kwargs: object) -> None:
        pass


def produce_rate(bootstrap: str, topic: str, count: int, size: int, acks: str) -> dict[str, Any]:
    """Produce ``count`` messages of ``size`` bytes as fast as the client goes; msgs/s."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5,
                         "enable.idempotence": acks == "all", "logger": _Quiet()})  # fmt: skip
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


def single_node(args: argparse.Namespace, base: Path) -> dict[str, Any]:
    with BrokerProcess(base / "single" / "data") as broker:
        create_topic(broker.bootstrap, "bench", PARTITIONS)
        log("single node, acks=1")
        return produce_rate(broker.bootstrap, "bench", args.messages, args.size, "1")


class Pinger:
    """One message at a time to partition 0 (acks=all); records each acknowledgement's time."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                  "linger.ms": 0, "enable.idempotence": True,
                                  "message.timeout.ms": 120000, "logger": _Quiet()})  # fmt: skip
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

    def first_ack_after(self, t0: float, timeout: float) -> float | None:
        """Seconds from ``t0`` to the acknowledgement of the first message sent after it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for sent, acked in list(self.acks):
                if sent >= t0:
                    return acked - t0
            time.sleep(0.01)
        return None


def failover(cluster: ClusterProcess, how: str, rounds: int) -> dict[str, Any]:
    topic = f"failover-{how}"
    cluster.create_topic(topic, 1, 3, {"min.insync.replicas": "2"})
    pinger = Pinger(cluster.bootstrap, topic)
    pinger.start()
    times: list[float | None] = []
    try:
        for i in range(rounds):
            cluster.wait_for_isr(topic, 0, {1, 2, 3}, timeout=120)
            leader = cluster.leader_of(topic, 0)
            log(f"{how} round {i + 1}: leader {leader}")
            t0 = time.monotonic()
            if how == "sigkill":
                cluster.kill(leader)
            else:
                threading.Thread(target=cluster.stop, args=(leader,), daemon=True).start()
            times.append(pinger.first_ack_after(t0, timeout=60))
            cluster.wait_for_leader(topic, 0, not_in={leader}, timeout=60)
            while cluster.broker(leader).pid is not None and how == "sigterm":
                time.sleep(0.05)  # the controlled shutdown completes before restarting
            cluster.start_broker(leader)
    finally:
        pinger.stop()
    measured = [t for t in times if t is not None]
    return {"rounds": rounds, "seconds": [None if t is None else round(t, 3) for t in times],
            "median_s": round(statistics.median(measured), 3) if measured else None,
            "max_s": round(max(measured), 3) if measured else None}  # fmt: skip


def catch_up(cluster: ClusterProcess, megabytes: int) -> dict[str, Any]:
    topic = "catchup"
    cluster.create_topic(topic, 1, 3, {"min.insync.replicas": "2"})
    leader = cluster.leader_of(topic, 0)
    follower = next(i for i in sorted(cluster.brokers) if i != leader)
    cluster.stop(follower)
    cluster.wait_for_isr(topic, 0, {1, 2, 3} - {follower}, timeout=120)
    size = 10_000
    count = megabytes * 1_000_000 // size
    produced = produce_rate(cluster.bootstrap, topic, count, size, "all")
    cluster.start_broker(follower)
    t0 = time.monotonic()
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


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small workload (a smoke run)")
    p.add_argument("--messages", type=int, default=200_000, help="messages per throughput run")
    p.add_argument("--size", type=int, default=100, help="message size in bytes")
    p.add_argument("--failovers", type=int, default=3, help="rounds of each failover kind")
    p.add_argument("--catchup-mb", type=int, default=200, help="MB a follower must catch up")
    args = p.parse_args()
    if args.quick:
        args.messages, args.failovers, args.catchup_mb = 20_000, 1, 20
    base = workdir()
    result: dict[str, Any] = {"benchmark": "cluster", "env": env_info(),
                              "messages": args.messages, "size": args.size}  # fmt: skip
    try:
        phase(result, "single_acks_1", lambda: single_node(args, base))
        cluster = ClusterProcess(base / "cluster", brokers=3,
                                 session_timeout_ms=SESSION_TIMEOUT_MS)  # fmt: skip
        try:
            phase(result, "cluster_start", lambda: {"ok": bool(cluster.start(120))})
            if "error" not in result["cluster_start"]:
                log("cluster RF 3, acks=all")

                def rf3() -> dict[str, Any]:
                    cluster.create_topic("bench", PARTITIONS, 3, {"min.insync.replicas": "2"})
                    return produce_rate(cluster.bootstrap, "bench", args.messages, args.size,
                                        "all")  # fmt: skip

                phase(result, "rf3_acks_all", rf3)
                phase(result, "failover_sigkill",
                      lambda: failover(cluster, "sigkill", args.failovers))  # fmt: skip
                phase(result, "failover_sigterm",
                      lambda: failover(cluster, "sigterm", args.failovers))  # fmt: skip
                phase(result, "follower_catch_up", lambda: catch_up(cluster, args.catchup_mb))
        finally:
            cluster.close()
        single = result.get("single_acks_1", {}).get("msgs_per_s")
        replicated = result.get("rf3_acks_all", {}).get("msgs_per_s")
        result["ratio_rf3_acks_all_vs_single_acks_1"] = ratio(replicated, single)
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
