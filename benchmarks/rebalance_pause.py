"""The rebalance pause: KIP-848's consumer protocol against the classic protocol, same run.

One strom broker; a topic of 6 partitions written at a steady pace (one record per partition
every 20 ms); a group of 3 confluent-kafka members. One member goes, two ways:

- ``leave``: ``close()`` (the classic protocol's LeaveGroup; KIP-848's heartbeat with epoch -1);
- ``crash``: kill -9 of a member running in its own process (found out by the session timeout).

Measured for the two members that stay: the **pause**, the longest time one of them went
without a record of a partition it held before and still holds after (the stop-the-world of an
eager rebalance; `strom.testing.rebalance.longest_gap`), and the **takeover**, from the event
until the survivors hold every partition. Three group setups, all on the same broker:
``classic`` (range, eager: every member revokes everything), ``classic_cooperative``
(cooperative-sticky, KIP-429) and ``consumer`` (KIP-848, ``group.protocol=consumer``). The
broker gives every protocol the same session timeout (3 s) and heartbeat interval (300 ms).

Prints ONE JSON line on stdout (progress on stderr); ``ratios`` are consumer / classic.

    python benchmarks/rebalance_pause.py [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import create_topic, env_info, log, ratio, remove, workdir  # noqa: E402

from strom.testing import BrokerProcess  # noqa: E402
from strom.testing.rebalance import (  # noqa: E402
    SteadyProducer,
    TimedConsumer,
    consumer_process,
    longest_gap,
    wait_for,
)

PARTITIONS = 6
SESSION_MS = 3000
HEARTBEAT_MS = 300
SETTINGS = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "group.consumer.heartbeat.interval.ms": str(HEARTBEAT_MS),
    "group.consumer.min.heartbeat.interval.ms": "100",
    "group.consumer.session.timeout.ms": str(SESSION_MS),
    "group.consumer.min.session.timeout.ms": "1000",
    "offsets.topic.num.partitions": "4",
}
SETUPS: dict[str, dict[str, Any]] = {
    "classic": {"group.protocol": "classic", "partition.assignment.strategy": "range",
                "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": HEARTBEAT_MS},
    "classic_cooperative": {"group.protocol": "classic",
                            "partition.assignment.strategy": "cooperative-sticky",
                            "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": HEARTBEAT_MS},
    "consumer": {"group.protocol": "consumer"},
}  # fmt: skip


def one_run(bootstrap: str, setup: str, how: str) -> dict[str, float]:
    """One member leaves or crashes; the survivors' pause and the takeover time (seconds)."""
    conf = SETUPS[setup]
    topic = f"pause-{setup}-{how}-{uuid.uuid4().hex[:6]}"
    group = f"g-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, PARTITIONS)
    producer = SteadyProducer(bootstrap, topic, PARTITIONS).start()
    victim_proc = None
    members: list[TimedConsumer] = []
    try:
        if how == "crash":
            victim_proc = consumer_process(bootstrap, group, topic, conf)
            assert victim_proc.stdout is not None
            line = ""
            deadline = time.monotonic() + 30
            while not line.startswith("ASSIGNED") and time.monotonic() < deadline:
                line = victim_proc.stdout.readline()
        members = [TimedConsumer(bootstrap, group, topic, f"m{i}", conf).start()
                   for i in range(2 if how == "crash" else 3)]  # fmt: skip
        survivors = members if how == "crash" else members[1:]
        wait_for(lambda: all(len(m.assignment) == 2 for m in survivors)
                 and (how == "crash" or len(members[0].assignment) == 2), 60,
                 "a balanced group")  # fmt: skip
        time.sleep(1.0)  # steady reading before the event
        kept = {m.name: set(m.assignment) for m in survivors}
        start = time.monotonic()
        if victim_proc is not None:
            victim_proc.send_signal(signal.SIGKILL)
            victim_proc.wait(10)
        else:
            members[0].stop(close=True)
        wait_for(lambda: set().union(*(m.assignment for m in survivors)) == set(range(PARTITIONS)),
                 60, "the survivors to hold every partition")  # fmt: skip
        takeover = time.monotonic() - start
        time.sleep(1.0)
        pause = longest_gap(survivors, kept, start - 0.5, time.monotonic())
        return {"pause_s": round(pause, 3), "takeover_s": round(takeover, 3)}
    finally:
        for m in members:
            m.stop()  # again for the one that left: a no-op
        if victim_proc is not None and victim_proc.poll() is None:
            victim_proc.kill()
        producer.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=2, help="runs per setup and event (median)")
    args = parser.parse_args()
    work = workdir()
    results: dict[str, dict[str, Any]] = {}
    proc = BrokerProcess(work / "strom-data", log_file=work / "strom.log", settings=SETTINGS)
    try:
        proc.start(timeout=30.0)
        for how in ("leave", "crash"):
            for setup in SETUPS:
                runs = []
                for i in range(args.repeat):
                    log(f"{setup} / {how} #{i + 1}")
                    runs.append(one_run(proc.bootstrap, setup, how))
                results.setdefault(how, {})[setup] = {
                    "pause_s": statistics.median(r["pause_s"] for r in runs),
                    "takeover_s": statistics.median(r["takeover_s"] for r in runs),
                    "runs": runs,
                }
    finally:
        proc.stop(timeout=10.0)
        remove(work)
    ratios = {
        f"{how}_pause_consumer_vs_{base}": ratio(results[how]["consumer"]["pause_s"],
                                                  results[how][base]["pause_s"])  # fmt: skip
        for how in results for base in ("classic", "classic_cooperative")
    }
    print(json.dumps({"benchmark": "rebalance_pause", "partitions": PARTITIONS, "members": 3,
                      "session_timeout_ms": SESSION_MS, "heartbeat_interval_ms": HEARTBEAT_MS,
                      "results": results, "ratios": ratios, "env": env_info()}))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
