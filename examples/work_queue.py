"""A work queue on a share group (KIP-932), against the same jobs read by a classic group.

Jobs of uneven cost (most take a few milliseconds, some hundreds) go to ``<prefix>-jobs``, a
topic with fewer partitions than there are workers. Some jobs fail once and succeed when
retried; a few fail every time ("poison"). The same jobs are then worked off twice, by
``--workers`` threads each time:

- **share group** (``ShareConsumer``, explicit acknowledgement): every worker reads every
  partition; a job done is ACCEPTed, a failed job RELEASEd — the broker delivers it again, with
  its delivery count raised, to whichever worker asks next — and a job that failed
  ``--attempts`` times is written to ``<prefix>-dead-letters`` and REJECTed (the group's
  ``share.delivery.count.limit`` is set to the same number, so the broker would archive it
  anyway). A slow job holds up nobody but its worker.
- **classic group** (``Consumer``): only as many workers as partitions get work; a failed job
  is retried in place (its partition waits), then dead-lettered to
  ``<prefix>-classic-dead-letters``.

Both runs are checked: every job done exactly once or dead-lettered, the dead letters exactly
the poison jobs. Prints one JSON line (``"ok": true``) with each run's jobs/s (first job taken
to last job settled: joining the group is not timed), retries, dead letters and busy workers,
and the share group's speed-up over the classic one.

    strom serve --data-dir /tmp/strom &
    python examples/work_queue.py --bootstrap 127.0.0.1:9092 [--jobs 400] [--workers 6]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import AcknowledgeType, Consumer, Producer, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Job:
    id: int
    cost_ms: int
    fails: int  # attempts that fail before one succeeds (>= attempts: poison)

    def encode(self) -> bytes:
        return json.dumps({"id": self.id, "cost_ms": self.cost_ms, "fails": self.fails}).encode()

    @staticmethod
    def decode(data: bytes) -> Job:
        d = json.loads(data)
        return Job(int(d["id"]), int(d["cost_ms"]), int(d["fails"]))


def make_jobs(count: int, attempts: int, seed: int = 7) -> list[Job]:
    rng = random.Random(seed)
    jobs = []
    for i in range(count):
        cost = rng.randint(150, 400) if rng.random() < 0.05 else rng.randint(2, 15)
        roll = rng.random()
        fails = attempts if roll < 0.03 else (1 if roll < 0.12 else 0)
        jobs.append(Job(i, cost, fails))
    return jobs


@dataclass
class Outcome:
    """What one run did (shared by its worker threads)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    done: Counter[int] = field(default_factory=Counter)
    dead: Counter[int] = field(default_factory=Counter)
    retries: int = 0
    busy: set[str] = field(default_factory=set)
    started: float = 0.0
    finished: float = 0.0

    def begin(self) -> None:
        """A worker has its first job in hand (the clock starts: joining is not timed)."""
        with self.lock:
            if not self.started:
                self.started = time.monotonic()

    def record(self, worker: str, job: Job, *, done: bool = False, dead: bool = False,
               retried: bool = False) -> None:  # fmt: skip
        with self.lock:
            self.busy.add(worker)
            if done:
                self.done[job.id] += 1
            if dead:
                self.dead[job.id] += 1
            if retried:
                self.retries += 1
            self.finished = time.monotonic()

    def settled(self, total: int) -> bool:
        with self.lock:
            return len(self.done) + len(self.dead) >= total

    def summary(self, jobs: list[Job], attempts: int) -> dict[str, Any]:
        poison = {j.id for j in jobs if j.fails >= attempts}
        elapsed = max(self.finished - self.started, 1e-9)
        return {
            "ok": (set(self.dead) == poison and set(self.done) == {j.id for j in jobs} - poison
                   and all(n == 1 for n in self.done.values())
                   and all(n == 1 for n in self.dead.values())),
            "elapsed_s": round(elapsed, 3), "jobs_per_s": round(len(jobs) / elapsed, 1),
            "done": len(self.done), "dead_lettered": len(self.dead), "retries": self.retries,
            "busy_workers": len(self.busy),
        }  # fmt: skip


def work(job: Job, attempt: int) -> bool:
    """Do the job (sleep its cost); whether this attempt succeeded."""
    time.sleep(job.cost_ms / 1000)
    return attempt > job.fails


def share_worker(name: str, bootstrap: str, group: str, topic: str, dead_topic: str,
                 attempts: int, outcome: Outcome, total: int) -> None:  # fmt: skip
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                              "share.acknowledgement.mode": "explicit", "max.poll.records": 5})
    dead = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    consumer.subscribe([topic])
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while not outcome.settled(total) and time.monotonic() < deadline:
            msgs = [m for m in consumer.poll(0.2) if not m.error()]
            for msg in msgs:
                outcome.begin()
                job = Job.decode(msg.value())
                attempt = msg.delivery_count()
                if work(job, attempt):
                    consumer.acknowledge(msg, AcknowledgeType.ACCEPT)
                    outcome.record(name, job, done=True)
                elif attempt >= attempts:
                    dead.produce(dead_topic, key=str(job.id).encode(), value=msg.value())
                    dead.flush(30)
                    consumer.acknowledge(msg, AcknowledgeType.REJECT)
                    outcome.record(name, job, dead=True)
                else:
                    consumer.acknowledge(msg, AcknowledgeType.RELEASE)  # again, elsewhere
                    outcome.record(name, job, retried=True)
            if msgs:
                consumer.commit_sync(30)
    finally:
        consumer.close()


def classic_worker(name: str, bootstrap: str, group: str, topic: str, dead_topic: str,
                   attempts: int, outcome: Outcome, total: int) -> None:  # fmt: skip
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest"})  # fmt: skip
    dead = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    consumer.subscribe([topic])
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while not outcome.settled(total) and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None or msg.error():
                continue
            outcome.begin()
            job = Job.decode(msg.value())
            for attempt in range(1, attempts + 1):  # retried in place: the partition waits
                if work(job, attempt):
                    outcome.record(name, job, done=True)
                    break
                if attempt < attempts:
                    outcome.record(name, job, retried=True)
            else:
                dead.produce(dead_topic, key=str(job.id).encode(), value=msg.value())
                dead.flush(30)
                outcome.record(name, job, dead=True)
    finally:
        consumer.close()


def run(target: Any, workers: int, *args: Any) -> Outcome:
    outcome = Outcome()
    threads = [threading.Thread(target=target, args=(f"w{i}", *args[:-1], outcome, args[-1]))
               for i in range(workers)]  # fmt: skip
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT_S + 60)
    return outcome


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--jobs", type=int, default=400)
    ap.add_argument("--workers", type=int, default=6)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--attempts", type=int, default=3, help="deliveries before a job is dead-lettered")
    args = ap.parse_args()
    prefix = f"work-queue-{int(time.time())}"
    jobs_topic, dead_topic, classic_dead = (f"{prefix}-jobs", f"{prefix}-dead-letters",
                                            f"{prefix}-classic-dead-letters")  # fmt: skip
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    for f in admin.create_topics([NewTopic(jobs_topic, args.partitions, -1),
                                  NewTopic(dead_topic, 1, -1), NewTopic(classic_dead, 1, -1)]).values():
        f.result(30)
    share_group = f"{prefix}-share"
    configs = [ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET) for name, value in
               (("share.auto.offset.reset", "earliest"),
                ("share.delivery.count.limit", str(max(args.attempts, 2))))]  # fmt: skip
    resource = ConfigResource(ResourceType.GROUP, share_group, incremental_configs=configs)
    for f in admin.incremental_alter_configs([resource]).values():
        f.result(30)
    jobs = make_jobs(args.jobs, args.attempts)
    # one job per record batch: a share consumer acquires whole batches (KIP-932's
    # batch-optimized acquisition), so jobs batched together would go to one worker
    producer = Producer({"bootstrap.servers": args.bootstrap, "linger.ms": 5,
                         "batch.num.messages": 1})
    for job in jobs:
        producer.produce(jobs_topic, key=str(job.id).encode(), value=job.encode())
    assert producer.flush(60) == 0
    print(f"{len(jobs)} jobs in {jobs_topic} ({args.partitions} partitions), "
          f"{args.workers} workers", file=sys.stderr)  # fmt: skip
    shared = run(share_worker, args.workers, args.bootstrap, share_group, jobs_topic, dead_topic,
                 args.attempts, len(jobs))  # fmt: skip
    classic = run(classic_worker, args.workers, args.bootstrap, f"{prefix}-classic", jobs_topic,
                  classic_dead, args.attempts, len(jobs))  # fmt: skip
    share_summary = shared.summary(jobs, args.attempts)
    classic_summary = classic.summary(jobs, args.attempts)
    print(json.dumps({
        "example": "work_queue", "ok": share_summary["ok"] and classic_summary["ok"],
        "jobs": len(jobs), "workers": args.workers, "partitions": args.partitions,
        "share_group": share_summary, "classic_group": classic_summary,
        "share_speedup": round(share_summary["jobs_per_s"] / max(classic_summary["jobs_per_s"], 1e-9), 2),
    }))  # fmt: skip
    sys.exit(0 if share_summary["ok"] and classic_summary["ok"] else 1)


if __name__ == "__main__":
    main()
