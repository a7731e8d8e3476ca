"""Helpers of the share-group tests: group configs, share consumers, a worker thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import AcknowledgeType, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

#: broker settings of the share-group test modules: short heartbeats and locks allowed
BROKER_SETTINGS = {
    "group.share.min.heartbeat.interval.ms": "500",
    "group.share.heartbeat.interval.ms": "500",
    "group.share.min.record.lock.duration.ms": "1000",
}


def set_group_configs(bootstrap: str, group: str, **configs: str) -> None:
    """IncrementalAlterConfigs SET of group configs (``share_auto_offset_reset="earliest"``:
    underscores for dots)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entries = [ConfigEntry(name.replace("_", "."), value,
                           incremental_operation=AlterConfigOpType.SET)
               for name, value in configs.items()]  # fmt: skip
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
    for future in admin.incremental_alter_configs([resource], request_timeout=15).values():
        future.result(timeout=20)


def share_consumer(bootstrap: str, group: str, topic: str, *, explicit: bool = False,
                   **conf: Any) -> ShareConsumer:  # fmt: skip
    settings = {"bootstrap.servers": bootstrap, "group.id": group, "max.poll.records": 10,
                "share.acknowledgement.mode": "explicit" if explicit else "implicit", **conf}
    consumer = ShareConsumer(settings)
    consumer.subscribe([topic])
    return consumer


@dataclass
class Delivery:
    value: bytes
    partition: int
    offset: int
    delivery_count: int
    consumer: str


Decide = Callable[[Any], "AcknowledgeType | None"]


@dataclass
class Worker:
    """A share consumer in a thread (explicit mode): each record gets ``decide(msg)``'s
    acknowledgement, committed after every poll. ``decide`` returning None leaves the record
    acquired: the worker then stops polling (explicit mode refuses a poll before every record
    of the previous one is acknowledged) and holds it until stopped."""

    bootstrap: str
    group: str
    topic: str
    name: str
    decide: Decide = lambda _m: AcknowledgeType.ACCEPT
    per_record_s: float = 0.0
    conf: dict[str, Any] = field(default_factory=dict)
    deliveries: list[Delivery] = field(default_factory=list)
    commit_errors: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    commits: int = 0  # commit_sync calls answered
    #: values whose ACCEPT the broker confirmed (commit_sync without error for its partition)
    accepted: list[bytes] = field(default_factory=list)
    #: called with every record polled (a history's ``record_message``)
    on_record: Callable[[Any], None] | None = None
    holding: bool = False  # stopped polling to hold records, after committing the others
    stop_event: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def start(self) -> Worker:
        self.thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self.thread.start()
        return self

    def _run(self) -> None:
        consumer = share_consumer(self.bootstrap, self.group, self.topic, explicit=True, **self.conf)
        try:
            holding = False
            while not self.stop_event.is_set():
                if self.holding:
                    self.stop_event.wait(0.1)
                    continue
                msgs = consumer.poll(0.5)
                acked = False
                accepting: list[tuple[int, bytes]] = []
                for msg in msgs:
                    if msg.error():
                        self.errors.append(str(msg.error()))
                        continue
                    self.deliveries.append(Delivery(msg.value(), msg.partition(), msg.offset(),
                                                    msg.delivery_count(), self.name))  # fmt: skip
                    if self.on_record is not None:
                        self.on_record(msg)
                    if self.per_record_s:
                        time.sleep(self.per_record_s)
                    ack = self.decide(msg)
                    if ack is None:
                        holding = True
                    else:
                        consumer.acknowledge(msg, ack)
                        acked = True
                        if ack == AcknowledgeType.ACCEPT:
                            accepting.append((msg.partition(), msg.value()))
                if acked:
                    failed = set()
                    for tp, err in consumer.commit_sync(30).items():
                        if err is not None:
                            self.commit_errors.append(f"{tp}: {err}")
                            failed.add(tp.partition)
                    self.accepted += [v for p, v in accepting if p not in failed]
                    self.commits += 1
                self.holding = holding
        finally:
            consumer.close()

    def stop(self, timeout: float = 30.0) -> None:
        self.stop_event.set()
        if self.thread is not None:
            self.thread.join(timeout)
            assert not self.thread.is_alive(), f"{self.name} did not stop"

    def values(self) -> list[bytes]:
        return [d.value for d in self.deliveries]


def wait_for(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.1)
