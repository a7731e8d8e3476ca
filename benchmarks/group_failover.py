"""Consumer-group failover time and group-vs-single consumer throughput: strom vs Tansu, Kafka.

(a) Failover: 6 partitions, 3 consumer processes in one group (session.timeout.ms=6000,
heartbeat.interval.ms=1000), a producer writing to every partition all along. One member dies
and we time until each of its partitions is consumed again by a surviving member. Three ways
to die: ``sigkill`` (process killed, its TCP connections close), ``sigstop`` (process frozen:
no LeaveGroup, connections stay open, only the session timeout can notice) and ``leave``
(consumer.close(), which sends LeaveGroup: the reference a clean shutdown gets).

(b) Throughput: the same pre-produced data consumed by a group of 3 consumer processes and by a
single consumer process; the assignment is settled (partitions paused) before the clock starts.

Prints ONE JSON line on stdout (progress on stderr).

    python benchmarks/group_failover.py [--quick] [--only strom|tansu|kafka] [--messages N]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    BROKER_NAMES,
    Broker,
    create_topic,
    env_info,
    log,
    make_brokers,
    ratio,
    remove,
    workdir,
)

PARTITIONS = 6
MEMBERS = 3
SESSION_TIMEOUT_MS = 6000
HEARTBEAT_MS = 1000


# --------------------------------------------------------------------------- worker process


def worker_main(argv: list[str]) -> int:
    """One group member. Emits JSON lines: assign / revoke / data events, times monotonic."""
    from confluent_kafka import Consumer  # noqa: PLC0415

    p = argparse.ArgumentParser()
    p.add_argument("--bootstrap")
    p.add_argument("--topic")
    p.add_argument("--group")
    p.add_argument("--id", type=int)
    p.add_argument("--gated", action="store_true")
    a = p.parse_args(argv)

    state = {"go": not a.gated, "closing": False}

    def emit(event: dict) -> None:
        event["w"] = a.id
        event["t"] = time.monotonic()
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()

    def on_go(*_: object) -> None:
        state["go"] = True

    def on_term(*_: object) -> None:
        state["closing"] = True

    signal.signal(signal.SIGUSR1, on_go)
    signal.signal(signal.SIGTERM, on_term)

    consumer = Consumer(
        {
            "bootstrap.servers": a.bootstrap,
            "group.id": a.group,
            "client.id": f"bench-w{a.id}",
            "session.timeout.ms": SESSION_TIMEOUT_MS,
            "heartbeat.interval.ms": HEARTBEAT_MS,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": True,
            "auto.commit.interval.ms": 1000,
        }
    )

    def on_assign(c, parts) -> None:  # noqa: ANN001
        c.assign(parts)
        if not state["go"] and parts:
            c.pause(parts)
        emit({"ev": "assign", "parts": sorted(tp.partition for tp in parts)})

    def on_revoke(_c, parts) -> None:  # noqa: ANN001
        emit({"ev": "revoke", "parts": sorted(tp.partition for tp in parts)})

    consumer.subscribe([a.topic], on_assign=on_assign, on_revoke=on_revoke)
    resumed = not a.gated
    try:
        while not state["closing"]:
            if state["go"] and not resumed:
                assignment = consumer.assignment()
                if assignment:
                    consumer.resume(assignment)
                resumed = True
                emit({"ev": "go"})
            # consume(n, t) returns after n messages or t seconds: keep t short so that the
            # reported times are within ~20 ms of the messages' arrival
            msgs = consumer.consume(num_messages=2000, timeout=0.02)
            seen: dict[int, list[int]] = {}
            for msg in msgs:
                if msg.error():
                    emit({"ev": "error", "error": str(msg.error())})
                    continue
                entry = seen.setdefault(msg.partition(), [0, -1])
                entry[0] += 1
                entry[1] = max(entry[1], msg.offset())
            if seen:
                emit({"ev": "data", "p": seen})
    finally:
        consumer.close()  # sends LeaveGroup
        emit({"ev": "closed"})
    return 0


# --------------------------------------------------------------------------- orchestration


class Group:
    """Several worker processes and the events they report."""

    def __init__(self, bootstrap: str, topic: str, n: int, gated: bool, logdir: Path) -> None:
        self.group = f"bench-{uuid.uuid4().hex[:8]}"
        self.events: list[dict] = []
        self.lock = threading.Lock()
        self.procs: dict[int, subprocess.Popen[str]] = {}
        self.started = time.monotonic()
        self.logdir = logdir
        for wid in range(n):
            cmd = [sys.executable, str(Path(__file__).resolve()), "--worker",
                   "--bootstrap", bootstrap, "--topic", topic, "--group", self.group,
                   "--id", str(wid)] + (["--gated"] if gated else [])
            with open(logdir / f"worker-{self.group}-{wid}.log", "ab") as err:
                proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
            self.procs[wid] = proc
            threading.Thread(target=self._read, args=(proc,), daemon=True).start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            with self.lock:
                self.events.append(event)

    def snapshot(self) -> list[dict]:
        with self.lock:
            return list(self.events)

    def assignments(self, alive: set[int] | None = None) -> dict[int, set[int]]:
        current: dict[int, set[int]] = {}
        for ev in self.snapshot():
            if ev["ev"] == "assign":
                current[ev["w"]] = set(ev["parts"])
            elif ev["ev"] in ("revoke", "closed"):
                current[ev["w"]] = set()
        if alive is not None:
            current = {w: s for w, s in current.items() if w in alive}
        return current

    def wait_stable(self, n: int, timeout: float, need_data: bool, settle: float = 1.5) -> float:
        """Wait until n members own all partitions, disjointly, unchanged for ``settle`` s."""
        deadline = time.monotonic() + timeout
        last_key, since = None, time.monotonic()
        while time.monotonic() < deadline:
            a = self.assignments(alive=set(self.procs))
            owned = [s for s in a.values() if s]
            union = set().union(*owned) if owned else set()
            ok = len(owned) == n and len(union) == PARTITIONS and sum(map(len, owned)) == PARTITIONS
            if ok and need_data:
                recent = time.monotonic() - 1.0
                fed = {int(p) for ev in self.snapshot()
                       if ev["ev"] == "data" and ev["t"] > recent for p in ev["p"]}
                ok = fed >= union
            key = tuple(sorted((w, tuple(sorted(s))) for w, s in a.items())) if ok else None
            if key != last_key:
                last_key, since = key, time.monotonic()
            elif key is not None and time.monotonic() - since >= settle:
                return time.monotonic() - self.started
            time.sleep(0.1)
        raise TimeoutError(f"group never stable with {n} members: {self.assignments()}; "
                           f"worker 0 stderr: {self.worker_log_tail()}")

    def worker_log_tail(self, lines: int = 3) -> str:
        try:
            text = (self.logdir / f"worker-{self.group}-0.log").read_text(errors="replace")
        except OSError:
            return ""
        return " | ".join(text.strip().splitlines()[-lines:])

    def signal(self, wid: int, sig: int) -> None:
        proc = self.procs[wid]
        if proc.poll() is None:
            os.kill(proc.pid, sig)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                try:
                    os.kill(proc.pid, signal.SIGCONT)
                    os.kill(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for proc in self.procs.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(5)


class BackgroundProducer:
    """Writes ``rate`` messages/s spread over every partition until stopped."""

    def __init__(self, bootstrap: str, topic: str, rate: int) -> None:
        from confluent_kafka import Producer  # noqa: PLC0415

        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self.topic, self.rate = topic, rate
        self.stopped = threading.Event()
        self.errors = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _cb(self, err: object, _msg: object) -> None:
        if err is not None:
            self.errors += 1

    def _run(self) -> None:
        i, start = 0, time.monotonic()
        while not self.stopped.is_set():
            target = start + i / self.rate
            delay = target - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            try:
                self.producer.produce(self.topic, b"y" * 100, partition=i % PARTITIONS,
                                      on_delivery=self._cb)
            except BufferError:
                self.producer.poll(0.1)
            self.producer.poll(0)
            i += 1

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(10)
        self.producer.flush(10)


def failover(broker: Broker, how: str, logdir: Path, timeout: float) -> dict[str, object]:
    topic = f"failover-{how}-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    producer = BackgroundProducer(broker.bootstrap, topic, rate=600)
    group = Group(broker.bootstrap, topic, MEMBERS, gated=False, logdir=logdir)
    victim = 0
    try:
        join_s = group.wait_stable(MEMBERS, timeout, need_data=True)
        victim_parts = group.assignments()[victim]
        t0 = time.monotonic()
        if how == "sigkill":
            group.signal(victim, signal.SIGKILL)
        elif how == "sigstop":
            group.signal(victim, signal.SIGSTOP)
        else:
            group.signal(victim, signal.SIGTERM)
        first_data: dict[int, float] = {}
        first_assign: dict[int, float] = {}
        deadline = t0 + timeout
        while time.monotonic() < deadline and len(first_data) < len(victim_parts):
            for ev in group.snapshot():
                if ev["w"] == victim or ev["t"] <= t0:
                    continue
                if ev["ev"] == "assign":
                    for p in set(ev["parts"]) & victim_parts:
                        first_assign.setdefault(p, ev["t"] - t0)
                elif ev["ev"] == "data":
                    for p in ev["p"]:
                        if int(p) in victim_parts:
                            first_data.setdefault(int(p), ev["t"] - t0)
            time.sleep(0.05)
        result: dict[str, object] = {
            "join_to_stable_s": round(join_s, 2),
            "victim_partitions": sorted(victim_parts),
        }
        if len(first_data) < len(victim_parts):
            result["error"] = f"partitions {sorted(victim_parts - set(first_data))} not consumed " \
                              f"again within {timeout}s"
        else:
            result["failover_s"] = round(max(first_data.values()), 2)
            result["reassigned_s"] = (
                round(max(first_assign.values()), 2) if len(first_assign) == len(victim_parts)
                else None
            )
        result["producer_errors"] = producer.errors
        return result
    finally:
        if how == "sigstop":
            group.signal(victim, signal.SIGKILL)
        group.stop()
        producer.stop()


def preproduce(bootstrap: str, topic: str, count: int) -> dict[int, int]:
    """``count`` 100-byte messages round-robin over the partitions; returns end offset per p."""
    from confluent_kafka import Producer  # noqa: PLC0415

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": 1})
    ends: dict[int, int] = {}
    errors = [0]

    def cb(err: object, msg: object) -> None:
        if err is not None:
            errors[0] += 1
        else:
            ends[msg.partition()] = max(ends.get(msg.partition(), -1), msg.offset() + 1)

    for i in range(count):
        while True:
            try:
                producer.produce(topic, b"z" * 100, partition=i % PARTITIONS, on_delivery=cb)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 1000 == 0:
            producer.poll(0)
    if producer.flush(120) or errors[0]:
        raise RuntimeError(f"pre-produce failed: {errors[0]} delivery errors")
    return ends


def group_throughput(broker: Broker, topic: str, ends: dict[int, int], n: int, logdir: Path,
                     timeout: float) -> dict[str, object]:
    total = sum(ends.values())
    group = Group(broker.bootstrap, topic, n, gated=True, logdir=logdir)
    try:
        join_s = group.wait_stable(n, timeout, need_data=False)
        t_go = time.monotonic()
        for wid in group.procs:
            group.signal(wid, signal.SIGUSR1)
        deadline = t_go + timeout
        while time.monotonic() < deadline:
            reached: dict[int, int] = {}
            consumed, t_last = 0, t_go
            for ev in group.snapshot():
                if ev["ev"] != "data":
                    continue
                t_last = max(t_last, ev["t"])
                for p, (cnt, last) in ev["p"].items():
                    consumed += cnt
                    reached[int(p)] = max(reached.get(int(p), -1), last + 1)
            if all(reached.get(p, 0) >= end for p, end in ends.items()):
                elapsed = t_last - t_go
                return {
                    "consumers": n,
                    "messages": total,
                    "delivered": consumed,
                    "join_to_stable_s": round(join_s, 2),
                    "seconds": round(elapsed, 3),
                    "msgs_per_s": round(total / elapsed),
                }
            time.sleep(0.05)
        raise TimeoutError(f"group of {n} did not consume {total} messages in {timeout}s")
    finally:
        group.stop()


def run_broker(broker: Broker, args: argparse.Namespace, logdir: Path) -> dict[str, object]:
    broker.start()
    log(f"{broker.name}: started pid {broker.pid} at {broker.bootstrap}")
    out: dict[str, object] = {}
    fo: dict[str, object] = {
        "session_timeout_ms": SESSION_TIMEOUT_MS,
        "heartbeat_interval_ms": HEARTBEAT_MS,
        "partitions": PARTITIONS,
        "members": MEMBERS,
    }
    for how in args.failover:
        try:
            fo[how] = failover(broker, how, logdir, args.timeout)
        except Exception as exc:  # noqa: BLE001 - report, never fake a figure
            log(traceback.format_exc())
            fo[how] = {"error": f"{type(exc).__name__}: {exc}"}
        log(f"{broker.name}: failover {how}: {fo[how]}")
    out["failover"] = fo
    try:
        count = args.messages // (10 if args.quick else 1)
        topic = f"groupthroughput-{uuid.uuid4().hex[:6]}"
        create_topic(broker.bootstrap, topic, PARTITIONS)
        ends = preproduce(broker.bootstrap, topic, count)
        single = group_throughput(broker, topic, ends, 1, logdir, args.timeout)
        log(f"{broker.name}: 1 consumer: {single}")
        grouped = group_throughput(broker, topic, ends, MEMBERS, logdir, args.timeout)
        log(f"{broker.name}: {MEMBERS} consumers: {grouped}")
        out["throughput"] = {
            "single": single,
            f"group_of_{MEMBERS}": grouped,
            f"ratio_{MEMBERS}_vs_1": ratio(grouped["msgs_per_s"], single["msgs_per_s"]),
        }
    except Exception as exc:  # noqa: BLE001
        log(traceback.format_exc())
        out["throughput"] = {"error": f"{type(exc).__name__}: {exc}"}
    return out


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        return worker_main(sys.argv[2:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10x fewer messages, sigkill only")
    parser.add_argument("--only", choices=BROKER_NAMES)
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--timeout", type=float, default=60.0, help="per step, seconds")
    args = parser.parse_args()
    args.failover = ["sigkill"] if args.quick else ["sigkill", "sigstop", "leave"]

    tmp = workdir()
    brokers, skipped = make_brokers(args.only, tmp)
    results: dict[str, object] = dict.fromkeys(BROKER_NAMES)
    try:
        for broker in brokers:
            try:
                results[broker.name] = run_broker(broker, args, tmp)
            except Exception as exc:  # noqa: BLE001
                log(traceback.format_exc())
                results[broker.name] = {"error": f"{type(exc).__name__}: {exc}",
                                        "log_tail": broker.log_tail()}
            finally:
                broker.stop()
    finally:
        for broker in brokers:
            broker.stop()
        remove(tmp)

    def fig(name: str, *path: str) -> float | None:
        node = results.get(name)
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        return node if isinstance(node, (int, float)) else None

    def against(ref: str) -> dict[str, float | None]:
        out = {f"failover_{how}": ratio(fig("strom", "failover", how, "failover_s"),
                                        fig(ref, "failover", how, "failover_s"))
               for how in args.failover}  # fmt: skip
        out["join_to_stable"] = ratio(fig("strom", "failover", "sigkill", "join_to_stable_s"),
                                      fig(ref, "failover", "sigkill", "join_to_stable_s"))
        out["group_speedup"] = ratio(fig("strom", "throughput", f"ratio_{MEMBERS}_vs_1"),
                                     fig(ref, "throughput", f"ratio_{MEMBERS}_vs_1"))
        return out

    ratios, ratios_vs_kafka = against("tansu"), against("kafka")
    env = env_info()
    env.update({"skipped": skipped, "quick": args.quick,
                "assignor": "librdkafka default (range,roundrobin), eager",
                "note": "consumers, producer and broker share this machine; read ratios"})
    print(json.dumps({**results, "ratios": ratios, "ratios_vs_kafka": ratios_vs_kafka, "env": env}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
