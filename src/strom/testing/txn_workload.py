"""Transactional writers, read_committed group readers and their checker, for fault tests.

:class:`TransactionalWriter` runs transactions from a thread with confluent-kafka: each holds
a few unique values (``<name>-<n>``) spread over a topic's partitions and ends in a commit, or
(by its seeded choice) an abort. Every transaction's outcome is recorded in a
:class:`TxnHistory`: *committed* (``commit_transaction`` returned), *aborted*
(``abort_transaction`` returned) or *unknown* (neither could be made sure of: a fatal error, a
commit that kept timing out; the producer is then made anew with the same transactional id,
which fences the old instance and settles its transaction). :class:`GroupReader` consumes
the topic read_committed in a consumer group, committing its offsets as it goes;
:class:`OffsetWatcher` polls the group's committed offsets from outside the group. At the end
:func:`read_committed_to_end` reads every partition read_committed from the start, once no
transaction is open any more.

:meth:`TxnHistory.check` then reports:

- **lost**: a committed transaction's value missing from the final read;
- **duplicated**: a value at more than one offset in the final read;
- **aborted_read**: an aborted transaction's value in the final read or seen by a group reader;
- **uncommitted_read**: a value a group reader saw whose transaction never committed (unknown,
  and absent from the final read);
- **never_committed_visible**: a value in the final read whose transaction never asked to
  commit (its outcome unknown before ``commit_transaction`` was called: only an abort could
  end it);
- **read_before_commit**: a value a group reader saw before its writer asked to commit it
  (read_committed must hold it back until the commit marker: the last stable offset);
- **torn**: a transaction of unknown outcome partly present in the final read;
- **reordered**: one writer's values out of its order within a partition;
- **unexpected**: a value no transaction wrote;
- **offsets_backwards**: a partition's committed group offset seen to decrease.

The checker is pure (no clock, no I/O; the recorded times are ``time.monotonic()`` of this
process, taken by the writer just before ``commit_transaction`` and by the reader just after
``poll`` returned the value): unit tests feed it histories by hand.
"""

from __future__ import annotations

import random
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from strom.admin.errors import forget_frames
from strom.testing.workload import QUIET

COMMITTED, ABORTED, UNKNOWN = "committed", "aborted", "unknown"
KINDS = ("lost", "duplicated", "aborted_read", "uncommitted_read", "never_committed_visible",
         "read_before_commit", "torn", "reordered", "unexpected", "offsets_backwards")  # fmt: skip
SHOWN = 10


@dataclass
class Txn:
    writer: str
    number: int
    values: list[bytes]
    outcome: str = UNKNOWN
    #: monotonic time just before ``commit_transaction`` was first called (None: never)
    commit_asked: float | None = None


@dataclass
class TxnReport:
    anomalies: dict[str, list[str]] = field(default_factory=lambda: {k: [] for k in KINDS})
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not any(self.anomalies.values())

    def __str__(self) -> str:
        lines = [" ".join(f"{k}={v}" for k, v in sorted(self.counts.items()))]
        for kind, found in self.anomalies.items():
            if found:
                lines.append(f"{kind}: {len(found)}")
                lines.extend(f"  {x}" for x in found[:SHOWN])
        return "\n".join(lines)

    def assert_ok(self) -> None:
        if not self.ok:
            raise AssertionError(f"transactional history has anomalies:\n{self}")


class TxnHistory:
    """What transactional writers did and readers saw (thread-safe recording)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.txns: list[Txn] = []
        #: (reader, partition, offset, value) seen by group readers
        self.group_reads: list[tuple[str, int, int, bytes]] = []
        #: (partition, committed offset) in the order the watcher saw them
        self.committed: list[tuple[int, int]] = []
        #: the final read_committed read: partition -> [(offset, value)]
        self.final: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
        #: value -> monotonic time a group reader first had it
        self.first_read: dict[bytes, float] = {}

    def record_txn(self, txn: Txn) -> None:
        with self._lock:
            self.txns.append(txn)

    def record_group_read(self, reader: str, partition: int, offset: int, value: bytes) -> None:
        now = time.monotonic()
        with self._lock:
            self.group_reads.append((reader, partition, offset, value))
            self.first_read.setdefault(value, now)

    def record_committed(self, partition: int, offset: int) -> None:
        with self._lock:
            self.committed.append((partition, offset))

    def record_final(self, partition: int, offset: int, value: bytes) -> None:
        with self._lock:
            self.final[partition].append((offset, value))

    def check(self) -> TxnReport:
        with self._lock:
            return check(self.txns, self.group_reads, self.committed, self.final,
                         self.first_read)  # fmt: skip


def _writer_of(value: bytes) -> tuple[str, int] | None:
    name, _, number = value.rpartition(b"-")
    try:
        return name.decode(), int(number)
    except (ValueError, UnicodeDecodeError):
        return None


def check(txns: Iterable[Txn], group_reads: Iterable[tuple[str, int, int, bytes]],
          committed: Iterable[tuple[int, int]],
          final: Mapping[int, list[tuple[int, bytes]]],
          first_read: Mapping[bytes, float] | None = None) -> TxnReport:  # fmt: skip
    report = TxnReport()
    out = report.anomalies
    txns, committed = list(txns), list(committed)
    txn_of: dict[bytes, Txn] = {}
    outcomes: dict[str, int] = defaultdict(int)
    for txn in txns:
        outcomes[txn.outcome] += 1
        for value in txn.values:
            txn_of[value] = txn
    where: dict[bytes, list[tuple[int, int]]] = defaultdict(list)
    for partition, entries in final.items():
        for offset, value in entries:
            where[value].append((partition, offset))
    for value, places in where.items():
        if len(places) > 1:
            out["duplicated"].append(f"{value!r} at {sorted(places)}")
        wrote = txn_of.get(value)
        if wrote is None:
            out["unexpected"].append(f"{value!r} at {places[0]}: written by no transaction")
        elif wrote.outcome == ABORTED:
            out["aborted_read"].append(f"{value!r} at {places[0]}: its transaction "
                                       f"{wrote.writer}#{wrote.number} was aborted")  # fmt: skip
    for txn in txns:
        present = [v for v in txn.values if v in where]
        if txn.outcome == COMMITTED:
            for v in txn.values:
                if v not in where:
                    out["lost"].append(f"{v!r} of committed {txn.writer}#{txn.number}")
        elif txn.outcome == UNKNOWN and present and txn.commit_asked is None:
            out["never_committed_visible"].append(f"{txn.writer}#{txn.number}: {len(present)} "
                                                  f"values visible, no commit ever asked")  # fmt: skip
        elif txn.outcome == UNKNOWN and present and len(present) != len(txn.values):
            out["torn"].append(f"{txn.writer}#{txn.number}: {len(present)} of "
                               f"{len(txn.values)} values visible")  # fmt: skip
        if first_read and txn.commit_asked is not None:
            early = [v for v in txn.values if first_read.get(v, txn.commit_asked) < txn.commit_asked]
            if early:
                ahead = txn.commit_asked - min(first_read[v] for v in early)
                out["read_before_commit"].append(f"{txn.writer}#{txn.number}: {early[0]!r} read "
                                                 f"{ahead:.3f} s before the commit was asked")  # fmt: skip
    seen_by_readers: set[bytes] = set()
    for reader, partition, offset, value in group_reads:
        if value in seen_by_readers:
            continue
        seen_by_readers.add(value)
        wrote = txn_of.get(value)
        if wrote is None:
            out["unexpected"].append(f"{value!r} read by {reader} at {partition}@{offset}")
        elif wrote.outcome == ABORTED:
            out["aborted_read"].append(f"{value!r} read by {reader} at {partition}@{offset}: "
                                       f"{wrote.writer}#{wrote.number} was aborted")  # fmt: skip
        elif wrote.outcome == UNKNOWN and value not in where:
            out["uncommitted_read"].append(f"{value!r} read by {reader} at {partition}@{offset}"
                                           f": {wrote.writer}#{wrote.number} never committed")  # fmt: skip
    for partition, entries in final.items():
        last: dict[str, tuple[int, int]] = {}
        for offset, value in sorted(entries):
            who = _writer_of(value)
            if who is None:
                continue
            name, number = who
            if name in last and last[name][0] > number:
                out["reordered"].append(f"{partition}@{offset} {value!r} after "
                                        f"{name}-{last[name][0]} at {last[name][1]}")  # fmt: skip
            last[name] = (number, offset)
    highest: dict[int, int] = {}
    for partition, offset in committed:
        if offset < highest.get(partition, -1):
            out["offsets_backwards"].append(f"partition {partition}: {highest[partition]} -> "
                                            f"{offset}")  # fmt: skip
        highest[partition] = max(offset, highest.get(partition, -1))
    report.counts = {"txns_" + k: v for k, v in outcomes.items()}
    report.counts["final_values"] = len(where)
    report.counts["group_reads"] = len(seen_by_readers)
    report.counts["offset_samples"] = len(committed)
    return report


class TransactionalWriter:
    """A thread running transactions on ``topic`` until :meth:`stop` (module doc)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, history: TxnHistory, *,
                 name: str, seed: int, abort_ratio: float = 0.2, max_size: int = 8,
                 transaction_timeout_ms: int = 20_000, pause_s: float = 0.02) -> None:  # fmt: skip
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.history = history
        self.name = name
        self.rng = random.Random(seed)
        self.abort_ratio = abort_ratio
        self.max_size = max_size
        self.pause_s = pause_s
        self.config: dict[str, Any] = {
            "bootstrap.servers": bootstrap, "transactional.id": f"nemesis-{name}",
            "acks": "all", "enable.idempotence": True, "linger.ms": 5, "logger": QUIET,
            "transaction.timeout.ms": transaction_timeout_ms, "message.timeout.ms": 15_000,
        }  # fmt: skip
        self.counts: dict[str, int] = defaultdict(int)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"txn-{name}", daemon=True)
        self._n = 0
        self._error: BaseException | None = None

    def start(self) -> TransactionalWriter:
        self._thread.start()
        return self

    def stop(self, timeout: float = 120.0) -> None:
        self._stop.set()
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise AssertionError(f"transactional writer {self.name} did not stop")
        if self._error is not None:
            raise AssertionError(f"transactional writer {self.name} failed: {self._error!r}")

    @property
    def committed(self) -> int:
        return self.counts[COMMITTED]

    def _producer(self) -> Any:
        """A producer with its transactions initialised (retried while the cluster is faulty;
        this fences an older instance and settles its open transaction)."""
        from confluent_kafka import KafkaException, Producer

        while True:
            producer = Producer(self.config)
            try:
                producer.init_transactions(30)
                return producer
            except KafkaException:
                if self._stop.is_set() and self.counts["init_failures"] > 20:
                    raise
                self.counts["init_failures"] += 1
                time.sleep(0.5)

    def _run(self) -> None:
        try:
            producer = self._producer()
            while not self._stop.is_set():
                producer, outcome = self._one(producer)
                self.counts[outcome] += 1
                time.sleep(self.pause_s)
            producer.flush(10)
        except BaseException as exc:  # noqa: BLE001 - re-raised by stop()
            self._error = exc

    def _one(self, producer: Any) -> tuple[Any, str]:
        from confluent_kafka import KafkaException

        size = self.rng.randint(1, self.max_size)
        abort = self.rng.random() < self.abort_ratio
        values = []
        for _ in range(size):
            self._n += 1
            values.append(f"{self.name}-{self._n}".encode())
        txn = Txn(self.name, self._n, values)
        try:
            producer.begin_transaction()
            for value in values:
                partition = self.rng.randrange(self.partitions)
                while True:
                    try:
                        producer.produce(self.topic, value, partition=partition)
                        break
                    except BufferError:
                        producer.poll(0.05)
            if abort:
                producer.abort_transaction(30)
                txn.outcome = ABORTED
            else:
                txn.commit_asked = time.monotonic()
                txn.outcome = self._commit(producer)
        except KafkaException as exc:
            forget_frames(exc)
            err = exc.args[0]
            if err.txn_requires_abort():
                try:
                    producer.abort_transaction(30)
                    txn.outcome = ABORTED
                except KafkaException as abort_exc:
                    forget_frames(abort_exc)
                    txn.outcome = UNKNOWN
            else:
                txn.outcome = UNKNOWN
        self.history.record_txn(txn)
        if txn.outcome == UNKNOWN:  # settle it: a new instance fences this one
            producer = self._producer()
        return producer, txn.outcome

    def _commit(self, producer: Any) -> str:
        from confluent_kafka import KafkaException

        for _attempt in range(6):
            try:
                producer.commit_transaction(20)
                return COMMITTED
            except KafkaException as exc:
                err = exc.args[0]
                if err.retriable() and not err.txn_requires_abort():
                    forget_frames(exc)
                    continue  # librdkafka allows the commit to be retried after a timeout
                raise
        return UNKNOWN


class GroupReader:
    """A read_committed consumer of ``topic`` in ``group``, committing as it reads."""

    def __init__(self, bootstrap: str, topic: str, group: str, history: TxnHistory, *,
                 name: str, commit_every: int = 20) -> None:  # fmt: skip
        from confluent_kafka import Consumer

        self.name = name
        self.topic = topic
        self.history = history
        self.commit_every = commit_every
        self.read = 0
        self.commits = 0
        self.commit_failures = 0
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "logger": QUIET,
            "isolation.level": "read_committed", "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "session.timeout.ms": 10_000,
            "heartbeat.interval.ms": 1000,
        })  # fmt: skip
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"reader-{name}", daemon=True)
        self._error: BaseException | None = None

    def start(self) -> GroupReader:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)
        if self._error is not None:
            raise AssertionError(f"group reader {self.name} failed: {self._error!r}")

    def _run(self) -> None:
        from confluent_kafka import KafkaException

        c = self.consumer
        try:
            c.subscribe([self.topic])
            since = 0
            while not self._stop.is_set():
                msg = c.poll(0.2)
                if msg is None or msg.error():
                    continue
                self.history.record_group_read(self.name, int(msg.partition() or 0),
                                               int(msg.offset() or 0), msg.value() or b"")  # fmt: skip
                self.read += 1
                since += 1
                if since >= self.commit_every:
                    since = 0
                    try:
                        c.commit(asynchronous=False)
                        self.commits += 1
                    except KafkaException:
                        self.commit_failures += 1
        except BaseException as exc:  # noqa: BLE001 - re-raised by stop()
            self._error = exc
        finally:
            c.close()


class OffsetWatcher:
    """Polls ``group``'s committed offsets of ``topic`` (OffsetFetch, not a member)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, group: str,
                 history: TxnHistory, interval_s: float = 0.5) -> None:  # fmt: skip
        from confluent_kafka import Consumer

        self.topic = topic
        self.partitions = partitions
        self.history = history
        self.interval_s = interval_s
        self.samples = 0
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                  "logger": QUIET, "enable.auto.commit": False})  # fmt: skip
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="offset-watcher", daemon=True)

    def start(self) -> OffsetWatcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self.consumer.close()

    def _run(self) -> None:
        from confluent_kafka import TopicPartition

        wanted = [TopicPartition(self.topic, p) for p in range(self.partitions)]
        while not self._stop.wait(self.interval_s):
            try:
                found = self.consumer.committed(wanted, timeout=5)
            except Exception:  # noqa: BLE001 - no coordinator just now: try again
                continue
            for tp in found:
                if tp.error is None and tp.offset >= 0:
                    self.history.record_committed(tp.partition, tp.offset)
                    self.samples += 1


def read_committed_to_end(bootstrap: str, topic: str, history: TxnHistory,
                          timeout: float = 120.0) -> int:  # fmt: skip
    """Once no transaction is open on ``topic`` (every partition's last stable offset at its
    high watermark), read it all read_committed into ``history.final``; how many values."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

    def consumer(isolation: str) -> Any:
        return Consumer({"bootstrap.servers": bootstrap, "group.id": f"final-{time.time_ns()}",
                         "enable.auto.commit": False, "logger": QUIET,
                         "isolation.level": isolation})  # fmt: skip

    committed, uncommitted = consumer("read_committed"), consumer("read_uncommitted")
    read = 0
    try:
        parts = sorted(committed.list_topics(topic, timeout=30).topics[topic].partitions)
        deadline = time.monotonic() + timeout
        while True:  # every transaction ended (or timed out): LSO == HW everywhere
            try:
                lso = {p: committed.get_watermark_offsets(TopicPartition(topic, p),
                                                          timeout=10)[1] for p in parts}  # fmt: skip
                hw = {p: uncommitted.get_watermark_offsets(TopicPartition(topic, p),
                                                           timeout=10)[1] for p in parts}  # fmt: skip
            except KafkaException as exc:
                # a leader moving after the faults (NOT_LEADER_OR_FOLLOWER): the client
                # refreshes its metadata; asked again below, within the deadline
                lso, hw = {0: str(exc)}, {}
            if lso == hw:
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"{topic}: transactions still open: LSO {lso}, HW {hw}")
            time.sleep(0.5)
        committed.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        position = dict.fromkeys(parts, 0)
        while any(position[p] < hw[p] for p in parts):
            if time.monotonic() > deadline:
                raise AssertionError(f"read {position} of {hw} of {topic} in {timeout:g} s")
            msg = committed.poll(0.5)
            if msg is None or msg.error():
                for tp in committed.position([TopicPartition(topic, p) for p in parts]):
                    position[tp.partition] = max(position[tp.partition], tp.offset)
                continue
            p, o = int(msg.partition() or 0), int(msg.offset() or 0)
            history.record_final(p, o, msg.value() or b"")
            position[p] = o + 1
            read += 1
    finally:
        committed.close()
        uncommitted.close()
    return read
