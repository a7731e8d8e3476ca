"""A mixed-fault nemesis (Jepsen's style) against a 3-broker cluster with transactions.

:func:`run` starts ZooKeeper and three brokers (each data directory on a tmpfs of its own when
this process may mount one, so a disk can really fill; every broker's storage I/O open to
:mod:`strom.testing.diskfault` for stalls), then, for a seed, runs faults one after another,
chosen and timed by ``random.Random(seed)``, against:

- two idempotent acks=all writers (:class:`strom.testing.workload.Writer`), checked by
  :mod:`strom.testing.history`;
- two transactional writers committing and aborting, two read_committed readers in a consumer
  group committing offsets, and a watcher of the group's committed offsets, checked by
  :mod:`strom.testing.txn_workload`.

The faults (:data:`FAULTS`), each verified to have landed (a fault that did not strike fails
the run: a nemesis that injects nothing proves nothing):

- ``kill``: kill -9 of a partition leader (or any broker), restarted after a moment; landed:
  the process died of SIGKILL;
- ``pause``: SIGSTOP of a broker past its ZooKeeper session, then SIGCONT; landed: the others'
  metadata dropped it;
- ``cut_leader`` / ``cut_controller``: nftables cuts a partition leader / the controller off
  from the other brokers and ZooKeeper; landed: the rules dropped packets;
- ``cut_zookeeper``: every broker cut from ZooKeeper; landed: packets dropped;
- ``full_disk``: a broker's tmpfs filled to the last byte (the broker takes its log directory
  offline when it next writes, and is restarted once the space is freed: Kafka's rule);
  landed: the file system had no space left;
- ``slow_disk``: every write and fsync of a broker takes seconds for a while; landed: writes or fsyncs stalled.

After each fault is healed the run waits until the cluster is whole again (every broker
registered, every workload partition led with its full ISR) and the writers have made
progress; a cluster that does not recover fails the run. At the end every writer stops, every
topic is read to its end, and both checkers must find nothing. A worker that fails (a writer
ended by a fatal client error, a wait for progress that timed out) does not skip the checks:
every worker is stopped, the topics are read and checked all the same, the brokers' log lines
about the idempotent topic are printed (the data directory may be gone when the failure is
read), and the failure is reported with the checkers' findings. The seed is printed first and
is in every failure's message, so ``run(seed=...)`` replays a failing schedule (the faults and
their timing; the interleaving with the workload is the machine's).

Command line (the long run: 100 faults)::

    python -m strom.testing.nemesis --faults 100 --seed 7 --work-dir /tmp/nemesis
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

from strom.testing.cluster import ClusterProcess, wait_until
from strom.testing.diskfault import DiskFaults, fill, free_bytes, tmpfs, tmpfs_available
from strom.testing.history import History
from strom.testing.netfault import Endpoint, NetworkFault
from strom.testing.txn_workload import (
    GroupReader,
    OffsetWatcher,
    TransactionalWriter,
    TxnHistory,
    read_committed_to_end,
)
from strom.testing.workload import QUIET, Writer, read_to_end

FAULTS = ("kill", "pause", "cut_leader", "cut_controller", "cut_zookeeper", "full_disk",
          "slow_disk")  # fmt: skip
BROKERS = (1, 2, 3)
SESSION_MS = 4000
IDEMPOTENT_TOPIC, TXN_TOPIC, PARTITIONS = "nemesis-idem", "nemesis-txn", 3
GROUP = "nemesis-readers"
SETTINGS = {
    "auto.leader.rebalance.enable": "true",
    "leader.imbalance.check.interval.seconds": "10",
    "replica.lag.time.max.ms": "3000",
    "replica.high.watermark.checkpoint.interval.ms": "1000",
    "log.flush.offset.checkpoint.interval.ms": "2000",
    "offsets.topic.num.partitions": "6",
    "transaction.state.log.num.partitions": "6",
    "transaction.state.log.min.isr": "2",
    "unclean.leader.election.enable": "false",
}
TOPIC_CONFIG = {"min.insync.replicas": "2", "segment.bytes": str(4 << 20)}
TMPFS_SIZE = "768m"


class NemesisFailure(AssertionError):
    """The run found a problem (the message names the seed)."""


@dataclass
class FaultRecord:
    number: int
    kind: str
    target: int | None
    evidence: str = ""
    held_s: float = 0.0
    recovered_s: float = 0.0


@dataclass
class Report:
    seed: int
    faults: list[FaultRecord] = field(default_factory=list)
    seconds: float = 0.0
    acked: int = 0
    idempotent: str = ""
    transactional: str = ""
    txn_counts: dict[str, int] = field(default_factory=dict)
    #: every anomaly kind of both checkers with how many were found (zeros included)
    anomalies: dict[str, int] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        kinds: dict[str, int] = {}
        for f in self.faults:
            kinds[f.kind] = kinds.get(f.kind, 0) + 1
        return {"seed": self.seed, "faults": len(self.faults), "by_kind": kinds,
                "seconds": round(self.seconds, 1), "acked_idempotent": self.acked,
                **self.txn_counts, "anomalies": self.anomalies}  # fmt: skip


class Nemesis:
    """The faults, on one cluster (see the module doc)."""

    def __init__(self, cluster: ClusterProcess, rng: random.Random, disk: DiskFaults,
                 mounts: dict[int, Path] | None, say: Callable[[str], None],
                 target: int | None = None) -> None:  # fmt: skip
        self.cluster = cluster
        #: aim every fault that picks a broker at this one (the seed's draws still happen, so
        #: the schedule and timings stay the seed's): replays a run whose faults all struck
        #: one broker, when the seed alone picks by who leads at the time
        self.target = target
        self.rng = rng
        self.disk = disk
        self.mounts = mounts
        self.say = say

    def kinds(self, wanted: Sequence[str]) -> list[str]:
        if self.mounts is None:
            return [k for k in wanted if k != "full_disk"]
        return list(wanted)

    # -- targets -------------------------------------------------------------------------
    def _some_leader(self) -> int:
        topic = self.rng.choice((IDEMPOTENT_TOPIC, TXN_TOPIC))
        index = self.rng.randrange(PARTITIONS)
        if self.target is not None:
            return self.target
        return self.cluster.leader_of(topic, index, timeout=60)

    def _some_broker(self) -> int:
        chosen = self.rng.choice(BROKERS)
        return chosen if self.target is None else self.target

    # -- the faults ----------------------------------------------------------------------
    def strike(self, number: int, kind: str) -> FaultRecord:
        """Inject one fault, check it landed, hold it, heal it; the record."""
        hold = self.rng.uniform(1.0, 5.0)
        fn = getattr(self, f"_{kind}")
        record = FaultRecord(number, kind, None)
        began = time.monotonic()
        fn(record, hold)
        record.held_s = round(time.monotonic() - began, 1)
        return record

    def _kill(self, record: FaultRecord, hold: float) -> None:
        b = record.target = self._some_leader() if self.rng.random() < 0.7 else self._some_broker()
        code = self.cluster.broker(b).kill()
        if code != -signal.SIGKILL:
            raise NemesisFailure(f"kill -9 of broker {b} did not land (exit {code})")
        record.evidence = f"exit {code}"
        time.sleep(hold)
        self.cluster.start_broker(b, timeout=120)

    def _pause(self, record: FaultRecord, hold: float) -> None:
        b = record.target = self._some_broker()
        self.cluster.pause(b)
        try:
            others = set(BROKERS) - {b}
            wait_until(lambda: b not in _registered(self.cluster, others), SESSION_MS / 1000 * 4,
                       f"broker {b} paused past its ZooKeeper session")  # fmt: skip
            record.evidence = "dropped from the others' metadata"
            time.sleep(hold / 2)
        finally:
            self.cluster.resume(b)

    def _cut(self, record: FaultRecord, hold: float, broker: int) -> None:
        record.target = broker
        fault = self.cluster.isolate(broker)
        try:
            time.sleep(hold + self.rng.uniform(0, SESSION_MS / 1000))  # sometimes past it
            dropped = fault.dropped()
        finally:
            fault.heal()
            fault.close()
        if dropped <= 0:
            raise NemesisFailure(f"the cut of broker {broker} dropped no packet")
        record.evidence = f"{dropped} packets dropped"

    def _cut_leader(self, record: FaultRecord, hold: float) -> None:
        self._cut(record, hold, self._some_leader())

    def _cut_controller(self, record: FaultRecord, hold: float) -> None:
        self._cut(record, hold, self.cluster.controller_id(timeout=60))

    def _cut_zookeeper(self, record: FaultRecord, hold: float) -> None:
        zk_host, _, zk_port = self.cluster.zk_connect.split("/", 1)[0].rpartition(":")
        fault = NetworkFault().start()
        try:
            for b in BROKERS:
                fault.drop(Endpoint(self.cluster.broker(b).host), Endpoint(zk_host, int(zk_port)))
            time.sleep(hold + self.rng.uniform(0, SESSION_MS / 1000))
            dropped = fault.dropped()
        finally:
            fault.heal()
            fault.close()
        if dropped <= 0:
            raise NemesisFailure("the cut of ZooKeeper dropped no packet")
        record.evidence = f"{dropped} packets dropped"

    def _full_disk(self, record: FaultRecord, hold: float) -> None:
        assert self.mounts is not None
        b = record.target = self._some_broker()
        mount = self.mounts[b]
        filler = fill(mount)
        try:
            left = free_bytes(mount)
            if left > 64 * 1024:
                raise NemesisFailure(f"broker {b}'s disk did not fill ({left} bytes free)")
            broker = self.cluster.broker(b)
            offline = False
            deadline = time.monotonic() + max(hold, 3.0) + 5
            while time.monotonic() < deadline:
                if "is offline after an I/O error" in broker.log_tail(400):
                    offline = True
                    break
                time.sleep(0.2)
            record.evidence = f"{left} bytes free; log dir offline: {offline}"
        finally:
            filler.unlink()
        # an offline log directory comes back with a restart (Kafka's rule)
        self.cluster.broker(b).kill()
        self.cluster.start_broker(b, timeout=120)

    def _slow_disk(self, record: FaultRecord, hold: float) -> None:
        b = record.target = self._some_broker()
        data = str(self.cluster.broker(b).data_dir)
        rule = self.disk.stall(self.rng.uniform(1.0, 3.0), ops=("fsync", "write"), path=data)
        try:
            deadline = time.monotonic() + hold + 10
            time.sleep(hold)
            while self.disk.struck(rule) == 0 and time.monotonic() < deadline:
                time.sleep(0.2)
            struck = self.disk.struck(rule)
        finally:
            self.disk.clear(rule)
        if struck <= 0:
            raise NemesisFailure(f"no write or fsync of broker {b} stalled")
        record.evidence = f"{struck} writes/fsyncs stalled"

    # -- recovery ------------------------------------------------------------------------
    def wait_whole(self, timeout: float = 180.0) -> float:
        """Until every broker is registered and every workload partition is led with its
        full ISR; the seconds it took."""
        began = time.monotonic()
        cluster = self.cluster
        wait_until(lambda: set(cluster.metadata().brokers) == set(BROKERS), timeout,
                   "every broker registered")  # fmt: skip

        def whole() -> bool:
            for topic in (IDEMPOTENT_TOPIC, TXN_TOPIC):
                md = cluster.metadata(topic).topics[topic]
                for p in md.partitions.values():
                    if p.leader < 0 or set(p.isrs) != set(BROKERS):
                        return False
            return True

        wait_until(whole, timeout - (time.monotonic() - began), "every partition led, ISR full",
                   interval=0.5)  # fmt: skip
        return time.monotonic() - began


def _stop_all(workers: Sequence[Any]) -> list[str]:
    """Stop every worker, even after one failed; the failures' messages."""
    failed = []
    for w in workers:
        try:
            w.stop()
        except AssertionError as exc:
            failed.append(str(exc))
    return failed


def _broker_lines(cluster: ClusterProcess, topic: str, lines: int = 60) -> str:
    """The last ``lines`` lines of each broker's log that name ``topic`` or warn (leadership,
    truncation, refused appends): printed when a worker failed, since a test's data
    directory may be gone by the time someone reads the failure."""
    out = []
    for b in BROKERS:
        broker = cluster.broker(b)
        try:
            text = broker.log_file.read_text(errors="replace").splitlines()
        except OSError:
            continue
        found = [ln for ln in text if topic in ln or " WARNING " in ln or " ERROR " in ln]
        out.append(f"--- broker {b} ({broker.log_file}), last {lines} lines about {topic}:")
        out += found[-lines:]
    return "\n".join(out)


def _registered(cluster: ClusterProcess, ask: set[int]) -> set[int]:
    """The brokers the metadata of the brokers in ``ask`` lists (any that answers)."""
    config: dict[str, Any] = {"bootstrap.servers": ",".join(cluster.broker(b).bootstrap
                                                            for b in ask), "logger": QUIET}
    admin = AdminClient(config)
    return set(admin.list_topics(timeout=5).brokers)


def _progress(writers: Sequence[TransactionalWriter], before: Sequence[int]
              ) -> Callable[[], bool]:  # fmt: skip
    def moved() -> bool:
        return any(w.committed > n for w, n in zip(writers, before, strict=True))

    return moved


@contextlib.contextmanager
def _disks(work_dir: Path, use_tmpfs: bool) -> Iterator[dict[int, Path] | None]:
    """A tmpfs per broker data directory (where the ClusterProcess puts it), or None."""
    if not use_tmpfs:
        yield None
        return
    with contextlib.ExitStack() as stack:
        mounts = {b: stack.enter_context(tmpfs(work_dir / f"broker-{b}" / "data", TMPFS_SIZE))
                  for b in BROKERS}  # fmt: skip
        yield mounts


def run(work_dir: Path, seed: int, *, faults: int | None = None, duration_s: float | None = None,
        kinds: Sequence[str] = FAULTS, say: Callable[[str], None] = print,
        target: int | None = None) -> Report:  # fmt: skip
    """The nemesis run (module doc): ``faults`` faults, or as many as fit in ``duration_s``
    (at least one of each kind asked for when it fits); ``target``: every fault that picks a
    broker strikes this one (:class:`Nemesis`). Raises :class:`NemesisFailure` (or the
    checkers' AssertionError, prefixed with the seed) on any finding."""
    if faults is None and duration_s is None:
        raise ValueError("give faults or duration_s")
    say(f"nemesis seed {seed} ({faults or '-'} faults, {duration_s or '-'} s)")
    rng = random.Random(seed)
    work_dir = Path(work_dir)
    report = Report(seed)
    started = time.monotonic()
    disk = DiskFaults(work_dir / "diskfaults")
    history, txns = History(), TxnHistory()
    failures: list[str] = []  # a worker's failure: the run still reads and checks (below)
    try:
        with _disks(work_dir, tmpfs_available()) as mounts, ClusterProcess(
            work_dir, brokers=len(BROKERS), settings=SETTINGS, session_timeout_ms=SESSION_MS,
            broker_env={b: disk.environment() for b in BROKERS},
        ) as cluster:  # fmt: skip
            for topic in (IDEMPOTENT_TOPIC, TXN_TOPIC):
                cluster.create_topic(topic, PARTITIONS, 3, TOPIC_CONFIG)
            nemesis = Nemesis(cluster, rng, disk, mounts, say, target)
            nemesis.wait_whole()
            chosen = nemesis.kinds(kinds)
            writers = [Writer(cluster.bootstrap, IDEMPOTENT_TOPIC, history, name=f"w{i}",
                              pause_s=0.01, key=None) for i in range(2)]  # fmt: skip
            txn_writers = [TransactionalWriter(cluster.bootstrap, TXN_TOPIC, PARTITIONS, txns,
                                               name=f"t{i}", seed=seed * 10 + i)
                           for i in range(2)]  # fmt: skip
            readers = [GroupReader(cluster.bootstrap, TXN_TOPIC, GROUP, txns, name=f"r{i}")
                       for i in range(2)]  # fmt: skip
            watcher = OffsetWatcher(cluster.bootstrap, TXN_TOPIC, PARTITIONS, GROUP, txns)
            workers: list[Any] = [*writers, *txn_writers, *readers, watcher]
            for w in workers:
                w.start()
            try:
                for w in writers:
                    w.wait_acked(50, timeout=60)
                number = 0
                order = list(chosen)
                rng.shuffle(order)
                while True:
                    if faults is not None and number >= faults:
                        break
                    if duration_s is not None and time.monotonic() - started >= duration_s:
                        break
                    kind = order[number] if number < len(order) else rng.choice(chosen)
                    number += 1
                    acked = [w.acked for w in writers]
                    committed = [t.committed for t in txn_writers]
                    record = nemesis.strike(number, kind)
                    record.recovered_s = round(nemesis.wait_whole(), 1)
                    report.faults.append(record)
                    for w, before in zip(writers, acked, strict=True):  # progress after it
                        w.wait_acked(before + 20, timeout=120)
                    wait_until(_progress(txn_writers, committed), 120,
                               "a transaction committed after the fault")
                    say(f"[seed {seed}] fault {number} {kind} on {record.target}: "
                        f"{record.evidence}; held {record.held_s} s, whole again in "
                        f"{record.recovered_s} s")  # fmt: skip
            except AssertionError as exc:
                failures.append(str(exc))
            finally:
                failures += _stop_all(workers)
            report.acked = sum(w.acked for w in writers)
            if failures:  # what the brokers said about the partitions, before the logs go
                say(_broker_lines(cluster, IDEMPOTENT_TOPIC))
            read_to_end(cluster.bootstrap, IDEMPOTENT_TOPIC, history, timeout=180)
            read_committed_to_end(cluster.bootstrap, TXN_TOPIC, txns, timeout=180)
    except AssertionError as exc:
        failures.append(str(exc))
        raise NemesisFailure(f"[nemesis seed {seed}] " + "; ".join(failures)) from exc
    report.seconds = time.monotonic() - started
    idem, txn = history.check(), txns.check()
    report.idempotent, report.transactional = str(idem), str(txn)
    report.txn_counts = dict(txn.counts)
    report.anomalies = {**{f"idempotent_{k}": n for k, n in idem.counts().items()},
                        **{f"txn_{k}": len(v) for k, v in txn.anomalies.items()}}  # fmt: skip
    say(f"[seed {seed}] idempotent: {idem}")
    say(f"[seed {seed}] transactional: {txn}")
    if failures or not idem.ok or not txn.ok:
        failed = "".join(f"{f}\n" for f in dict.fromkeys(failures))
        raise NemesisFailure(f"[nemesis seed {seed}] {failed}anomalies:\n{idem}\n{txn}")
    say(json.dumps(report.summary()))
    return report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m strom.testing.nemesis",
                                     description="A mixed-fault nemesis run (needs root, "
                                     "ZooKeeper and nftables).")  # fmt: skip
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--faults", type=int, default=None)
    parser.add_argument("--duration", type=float, default=None, help="seconds")
    parser.add_argument("--kinds", default=",".join(FAULTS))
    parser.add_argument("--target", type=int, default=None,
                        help="aim every fault that picks a broker at this broker id")
    parser.add_argument("--work-dir", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None, help="write the report here")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "big")
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="strom-nemesis-"))
    faults = args.faults if args.faults is not None or args.duration else 20
    try:
        report = run(work, seed, faults=faults, duration_s=args.duration,
                     kinds=args.kinds.split(","), target=args.target)  # fmt: skip
    except AssertionError as exc:
        print(exc, file=sys.stderr)
        return 1
    if args.json:
        args.json.write_text(json.dumps({**report.summary(),
                                         "records": [asdict(f) for f in report.faults]}))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
