"""A consumer-group member for cluster fault tests: reads, records, commits, checks commits.

:class:`GroupReader` runs a confluent-kafka consumer of one group in a thread. It records every
message into a :class:`~strom.testing.history.History`, commits what it consumed synchronously
(every ``commit_every`` messages and before it stops) and keeps:

- ``acked_commits``: per partition, the highest offset a commit was *acknowledged* for;
- ``backwards``: every time the group's committed offset, read back from the coordinator
  (``committed()``), was below an offset acknowledged earlier (a lost commit);
- ``first_read``: per partition, the offset of the first message this member read (for a
  member that must resume exactly at the group's committed offsets).

Commit failures while the coordinator moves (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
REQUEST_TIMED_OUT …) are counted and retried at the next commit; they are expected in a fault
test, a commit acknowledged and then lost is not.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from strom.testing.history import History
from strom.testing.workload import QUIET


class GroupReader:
    def __init__(self, bootstrap: str, topic: str, group: str, history: History, *,
                 name: str = "c", commit_every: int = 20, protocol: str = "classic") -> None:  # fmt: skip
        self.bootstrap = bootstrap
        self.protocol = protocol  # "consumer": KIP-848 (the broker sets session and heartbeats)
        self.topic = topic
        self.group = group
        self.history = history
        self.name = name
        self.commit_every = commit_every
        self.read = 0
        self.acked_commits: dict[int, int] = {}
        self.commits_ok = 0
        self.commit_errors: list[str] = []
        self.backwards: list[str] = []
        self.first_read: dict[int, int] = {}
        self.position: dict[int, int] = {}  # partition -> next offset to read
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"reader-{name}", daemon=True)

    def start(self) -> GroupReader:
        self._thread.start()
        return self

    def _run(self) -> None:
        from confluent_kafka import Consumer

        try:
            timing = ({"group.protocol": "consumer"} if self.protocol == "consumer" else
                      {"session.timeout.ms": 10_000, "heartbeat.interval.ms": 1000})  # fmt: skip
            consumer = Consumer({
                "bootstrap.servers": self.bootstrap, "group.id": self.group,
                "enable.auto.commit": False, "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": 100, "logger": QUIET, **timing,
            })  # fmt: skip
            consumer.subscribe([self.topic])
            uncommitted = 0
            last_check = time.monotonic()
            while not self._stop.is_set():
                msg = consumer.poll(0.2)
                if msg is not None and not msg.error():
                    p, offset = int(msg.partition() or 0), int(msg.offset() or 0)
                    self.history.record_message(msg, self.name)
                    self.first_read.setdefault(p, offset)
                    self.position[p] = offset + 1
                    self.read += 1
                    uncommitted += 1
                if uncommitted >= self.commit_every and self._commit(consumer):
                    uncommitted = 0
                if time.monotonic() - last_check > 1.0:
                    self._check_committed(consumer)
                    last_check = time.monotonic()
            for _ in range(20):  # the final commit, through a coordinator change if need be
                if self._commit(consumer):
                    break
                time.sleep(0.5)
            self._check_committed(consumer)
            consumer.close()
        except BaseException as exc:  # noqa: BLE001 - re-raised by stop()
            self._error = exc

    def _commit(self, consumer: Any) -> bool:
        from confluent_kafka import KafkaException

        try:
            done = consumer.commit(asynchronous=False)
        except KafkaException as exc:
            if "_NO_OFFSET" in str(exc):  # nothing consumed since the last commit
                return True
            self.commit_errors.append(str(exc))
            return False
        for tp in done or ():
            if tp.error is None and tp.offset >= 0:
                prev = self.acked_commits.get(tp.partition, -1)
                self.acked_commits[tp.partition] = max(prev, tp.offset)
        self.commits_ok += 1
        return True

    def _check_committed(self, consumer: Any) -> None:
        """The coordinator's committed offsets are never below an acknowledged commit."""
        from confluent_kafka import KafkaException, TopicPartition

        wanted = dict(self.acked_commits)
        if not wanted:
            return
        try:
            found = consumer.committed([TopicPartition(self.topic, p) for p in wanted],
                                       timeout=5)  # fmt: skip
        except KafkaException:
            return  # no coordinator right now: checked again later
        for tp in found:
            # no committed offset at all (negative) after an acknowledged commit counts too
            if tp.error is None and tp.offset < wanted[tp.partition]:
                self.backwards.append(f"partition {tp.partition}: committed {tp.offset} after "
                                      f"a commit of {wanted[tp.partition]} was acknowledged")  # fmt: skip

    def wait_read(self, count: int, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while self.read < count:
            if self._error is not None:
                raise AssertionError(f"reader {self.name} failed: {self._error!r}")
            if time.monotonic() >= deadline:
                raise AssertionError(f"reader {self.name}: read {self.read} of {count} within "
                                     f"{timeout:g} s ({self.commit_errors[-3:]})")  # fmt: skip
            time.sleep(0.05)

    def wait_position(self, ends: dict[int, int], start: dict[int, int] | None = None,
                      timeout: float = 60.0) -> None:  # fmt: skip
        """Until this member read every partition up to ``ends`` (partition -> end offset);
        ``start``: where the group's committed offsets had it begin (nothing to read there
        when already at the end)."""
        begin = start or {}
        deadline = time.monotonic() + timeout
        while any(self.position.get(p, begin.get(p, 0)) < end for p, end in ends.items()):
            if self._error is not None:
                raise AssertionError(f"reader {self.name} failed: {self._error!r}")
            if time.monotonic() >= deadline:
                raise AssertionError(f"reader {self.name}: at {self.position}, wanted {ends}")
            time.sleep(0.05)

    def wait_commits(self, count: int, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while self.commits_ok < count:
            if time.monotonic() >= deadline:
                raise AssertionError(f"reader {self.name}: {self.commits_ok} of {count} commits "
                                     f"within {timeout:g} s ({self.commit_errors[-3:]})")  # fmt: skip
            time.sleep(0.05)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)
        if self._error is not None:
            raise AssertionError(f"reader {self.name} failed: {self._error!r}")


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """Each partition's high watermark now."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "end-offsets",
                         "logger": QUIET})  # fmt: skip
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                for p in range(partitions)}  # fmt: skip
    finally:
        consumer.close()


def coordinator_of(cluster: Any, group: str, timeout: float = 60.0) -> int:
    """The group's coordinator as a live broker answers FindCoordinator (v3); asked again until
    ``timeout``: the first FindCoordinator creates ``__consumer_offsets`` (50 partitions, 3
    replicas), which a loaded machine may take longer than one request to do.

    Asked over strom's codec, not with librdkafka's DescribeConsumerGroups, which aborted the
    whole test process (SIGABRT inside ``describe_consumer_groups``) in one run in four of
    test_group_commit_acks on a loaded machine, before this change too; librdkafka issue 4605
    reports an assertion failing there after a FindCoordinator timed out."""
    from strom.testing.cluster import wait_until
    from strom.testing.raw import RawConnection

    def ask() -> int | None:
        for broker_id in sorted(cluster.running_ids()):
            try:  # a killed or paused broker does not answer: ask the next one
                with RawConnection(cluster.broker(broker_id).bootstrap, timeout=15) as conn:
                    resp = conn.request(10, 3, key=group, key_type=0)
            except OSError:
                continue
            return int(resp.node_id) if int(resp.error_code) == 0 else None
        return None

    return wait_until(ask, timeout, f"a coordinator for group {group}", interval=0.5)
