"""Workloads for fault tests that record into a :class:`~strom.testing.history.History`.

:class:`Writer` produces unique values (``<name>-<n>``) from a thread with confluent-kafka,
idempotent and ``acks=all`` by default, recording every attempt, acknowledgement and failure;
:func:`read_to_end` reads every partition of a topic from its start to its high-water mark as
it is when called, recording every message. A fault test is then::

    history = History()
    with Writer(cluster.bootstrap, "orders", history) as writer:
        writer.wait_acked(100)            # traffic flows before the fault
        cluster.kill(cluster.leader_of("orders", 0))
        writer.wait_acked(writer.acked + 100, timeout=60)   # and again after it
    read_to_end(cluster.bootstrap, "orders", history)
    history.check().assert_ok()

Reading to the high-water mark, not up to a count, matters: a write whose outcome the producer
never learnt (a timeout) may be in the log, and stopping at "as many as were acknowledged"
would then miss acknowledged ones at the end.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from strom.testing.history import History


class _Quiet:
    """librdkafka's log lines about brokers killed on purpose are not test output."""

    def log(self, *_args: object, **_kwargs: object) -> None:
        pass


QUIET = _Quiet()

#: a directory: each Writer then runs with librdkafka's ``debug=eos,msg`` and logs into
#: ``<dir>/<writer name>.log`` (the client's side of an idempotence finding: its epoch bumps,
#: retries and the errors it acted on)
DEBUG_DIR_ENV = "STROM_WRITER_DEBUG_DIR"


def _client_log(name: str) -> dict[str, Any]:
    """librdkafka logging for a writer: silent, or its EOS debug log in a file (env above)."""
    folder = os.environ.get(DEBUG_DIR_ENV)
    if not folder:
        return {"logger": QUIET}
    logger = logging.getLogger(f"strom.testing.writer.{name}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    if not logger.handlers:
        Path(folder).mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(Path(folder) / f"{name}.log")
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
        logger.addHandler(handler)
    return {"logger": logger, "debug": "eos,msg"}


class Writer:
    """A producer thread writing ``<name>-<n>`` values to ``topic`` until :meth:`stop`."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        history: History,
        *,
        name: str = "p",
        config: Mapping[str, Any] | None = None,
        pause_s: float = 0.002,
        key: bytes | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.history = history
        self.name = name
        self.pause_s = pause_s
        self.key = key
        self.config: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "message.timeout.ms": 60_000,
            **_client_log(name),
            **(config or {}),
        }
        self.sent = 0
        self.acked = 0
        self.failed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"writer-{name}", daemon=True)
        self._error: BaseException | None = None
        self._record = history.delivery_callback(name)

    def _on_delivery(self, err: Any, msg: Any) -> None:
        self._record(err, msg)
        if err is None:
            self.acked += 1
        else:
            self.failed += 1

    def _run(self) -> None:
        from confluent_kafka import Producer

        try:
            producer = Producer(self.config)
            while not self._stop.is_set():
                value = f"{self.name}-{self.sent}".encode()
                self.history.attempt(self.topic, self.key, value, self.name)
                while True:
                    try:
                        producer.produce(self.topic, value, key=self.key,
                                         on_delivery=self._on_delivery)  # fmt: skip
                        break
                    except BufferError:
                        producer.poll(0.05)
                self.sent += 1
                producer.poll(self.pause_s)
            producer.flush(float(self.config["message.timeout.ms"]) / 1000 + 10)
        except BaseException as exc:  # noqa: BLE001 - re-raised by stop()
            self._error = exc

    def start(self) -> Self:
        self._thread.start()
        return self

    def wait_acked(self, count: int, timeout: float = 30.0) -> None:
        """Until at least ``count`` writes were acknowledged (AssertionError after timeout)."""
        deadline = time.monotonic() + timeout
        while self.acked < count:
            if self._error is not None:
                raise AssertionError(f"writer {self.name} failed: {self._error!r}")
            if time.monotonic() >= deadline:
                raise AssertionError(f"writer {self.name}: {self.acked} of {count} writes "
                                     f"acknowledged within {timeout:g} s "
                                     f"({self.sent} sent, {self.failed} failed)")  # fmt: skip
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop writing; wait for every outstanding write's outcome (flush)."""
        self._stop.set()
        self._thread.join(float(self.config["message.timeout.ms"]) / 1000 + 30)
        if self._error is not None:
            raise AssertionError(f"writer {self.name} failed: {self._error!r}")

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def read_to_end(
    bootstrap: str,
    topic: str,
    history: History,
    *,
    consumer_name: str = "c",
    timeout: float = 90.0,
    config: Mapping[str, Any] | None = None,
) -> int:
    """Read every partition of ``topic`` from its start to its high-water mark as it is now,
    recording each message; the number read. AssertionError if it cannot within ``timeout``."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"read-to-end-{time.time_ns()}",
        "enable.auto.commit": False, "logger": QUIET, **(config or {}),
    })  # fmt: skip
    read = 0
    try:
        md = consumer.list_topics(topic, timeout=30).topics[topic]
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                for p in md.partitions}  # fmt: skip
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        position = dict.fromkeys(ends, 0)
        deadline = time.monotonic() + timeout
        while any(position[p] < ends[p] for p in ends):
            if time.monotonic() >= deadline:
                raise AssertionError(f"read {position} of {ends} of {topic} in {timeout:g} s")
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                # the fetch position passes what is never delivered (transaction markers)
                for tp in consumer.position([TopicPartition(topic, p) for p in ends]):
                    position[tp.partition] = max(position[tp.partition], tp.offset)
                continue
            history.record_message(msg, consumer_name)
            position[int(msg.partition() or 0)] = int(msg.offset() or 0) + 1
            read += 1
    finally:
        consumer.close()
    return read
