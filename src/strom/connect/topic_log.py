"""A compacted topic read from the beginning and tailed (Kafka Connect's ``KafkaBasedLog``).

Each distributed backing store (configs, offsets, statuses) is one of these: on :meth:`start`
the topic is created if missing (``cleanup.policy=compact``, the configured partitions and
replication factor), a confluent-kafka consumer is assigned every partition from the
beginning and a thread hands each record to ``on_record(key, value, partition, offset)`` (a
null value is a tombstone) until :meth:`stop`. :meth:`read_to_end` waits until the thread has
passed every partition's end offset as it was when asked. Writes go through an idempotent
producer (``acks=all``, murmur2 partitioning of the key, as the Java client) and are flushed
before :meth:`send` returns, so a store never reports a write the broker did not acknowledge.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as TP
from confluent_kafka.admin import AdminClient, NewTopic

LOG = logging.getLogger("strom.connect.topic_log")
OnRecord = Callable[[bytes | None, bytes | None, int, int], None]


class TopicLogError(Exception):
    """The topic could not be created, read or written (one readable line)."""


def ensure_topic(bootstrap: str, topic: str, partitions: int, replication: int,
                 timeout: float = 30.0, client_config: Mapping[str, str] | None = None) -> int:
    """Create ``topic`` compacted if it does not exist; its partition count.
    ``client_config``: the worker's client settings (security), over ``bootstrap``."""
    admin = AdminClient({"bootstrap.servers": bootstrap, **(client_config or {})})
    # All topics, not just this one: a Metadata request naming it could auto-create it with
    # the broker's defaults (one partition, not compacted).
    meta = admin.list_topics(timeout=timeout).topics.get(topic)
    if meta is not None and meta.error is None and meta.partitions:
        return len(meta.partitions)
    new = NewTopic(topic, num_partitions=partitions, replication_factor=replication,
                   config={"cleanup.policy": "compact"})
    try:
        admin.create_topics([new], request_timeout=timeout)[topic].result(timeout)
        LOG.info("created topic %s (%d partitions, compacted)", topic, partitions)
    except KafkaException as exc:
        err = exc.args[0] if exc.args else None
        if not (isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS):
            reason = err.str() if isinstance(err, KafkaError) else str(exc)
            raise TopicLogError(f"cannot create topic {topic}: {reason}") from None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        meta = admin.list_topics(timeout=timeout).topics.get(topic)
        if meta is not None and meta.error is None and meta.partitions:
            return len(meta.partitions)
        time.sleep(0.1)
    raise TopicLogError(f"topic {topic} did not appear within {timeout:.0f}s")


class TopicLog:
    def __init__(self, bootstrap: str, topic: str, *, partitions: int, replication: int,
                 client_id: str, on_record: OnRecord,
                 producer_overrides: dict[str, Any] | None = None,
                 client_config: Mapping[str, str] | None = None) -> None:
        self.bootstrap = bootstrap
        # the worker's own client settings (its top-level security), under the ones below
        self.client_config = {"bootstrap.servers": bootstrap, **(client_config or {})}
        self.topic = topic
        self.partitions = partitions
        self.replication = replication
        self.client_id = client_id
        self.on_record = on_record
        self.producer_overrides = producer_overrides or {}
        self._consumer: Consumer | None = None
        self._producer: Producer | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._cond = threading.Condition()
        self._requests = 0  # read_to_end calls not yet served
        self._served = 0
        self._send_lock = threading.Lock()

    def start(self, timeout: float = 60.0) -> None:
        count = ensure_topic(self.bootstrap, self.topic, self.partitions, self.replication,
                             client_config=self.client_config)
        self._producer = Producer({
            **self.client_config, "client.id": self.client_id + "-producer",
            "enable.idempotence": True, "acks": "all", "linger.ms": 0,
            "partitioner": "murmur2_random", **self.producer_overrides})
        self._consumer = Consumer({
            **self.client_config, "client.id": self.client_id + "-consumer",
            "group.id": self.client_id, "enable.auto.commit": False,
            "enable.partition.eof": False, "fetch.wait.max.ms": 100})
        self._consumer.assign([TP(self.topic, p, OFFSET_BEGINNING) for p in range(count)])
        self._thread = threading.Thread(target=self._run, name=f"log-{self.topic}", daemon=True)
        self._thread.start()
        if not self.read_to_end(timeout):
            raise TopicLogError(f"could not read topic {self.topic} to its end within "
                                f"{timeout:.0f}s")

    def _run(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        while not self._stopping.is_set():
            with self._cond:
                wanted = self._requests
            ends = self._end_offsets() if wanted > self._served else None
            while True:
                for msg in consumer.consume(500, 0.1):
                    if msg.error() is not None:
                        LOG.warning("%s: %s", self.topic, msg.error())
                        continue
                    try:
                        self.on_record(msg.key(), msg.value(), msg.partition() or 0,
                                       msg.offset() or 0)
                    except Exception:  # noqa: BLE001 - one bad record must not stop the log
                        LOG.exception("%s: record at offset %d not applied", self.topic,
                                      msg.offset())
                if ends is None or self._reached(ends) or self._stopping.is_set():
                    break
            if ends is not None:
                with self._cond:
                    self._served = wanted
                    self._cond.notify_all()

    def _end_offsets(self) -> dict[int, int]:
        consumer = self._consumer
        assert consumer is not None
        ends: dict[int, int] = {}
        for tp in consumer.assignment():
            try:
                ends[tp.partition] = consumer.get_watermark_offsets(tp, timeout=10,
                                                                    cached=False)[1]
            except KafkaException as exc:
                LOG.warning("%s: end offset of partition %d: %s", self.topic, tp.partition, exc)
                ends[tp.partition] = 0
        return ends

    def _reached(self, ends: dict[int, int]) -> bool:
        consumer = self._consumer
        assert consumer is not None
        positions = consumer.position([TP(self.topic, p) for p in ends])
        for tp in positions:
            position = tp.offset if tp.offset >= 0 else 0
            if position < ends[tp.partition]:
                return False
        return True

    def read_to_end(self, timeout: float = 30.0) -> bool:
        """True once every record written before this call was handed to ``on_record``."""
        with self._cond:
            self._requests += 1
            wanted = self._requests
            return self._cond.wait_for(lambda: self._served >= wanted or
                                       self._stopping.is_set(), timeout)

    def send(self, records: Sequence[tuple[bytes, bytes | None]], timeout: float = 30.0) -> None:
        """Produce (key, value) records in order and wait for their acknowledgement."""
        producer = self._producer
        assert producer is not None
        errors: list[KafkaError] = []

        def delivered(err: KafkaError | None, _msg: Any) -> None:
            if err is not None:
                errors.append(err)

        with self._send_lock:
            for key, value in records:
                producer.produce(self.topic, key=key, value=value, on_delivery=delivered)
            left = producer.flush(timeout)
        if errors or left:
            raise TopicLogError(f"writing to {self.topic} failed: "
                                f"{errors[0].str() if errors else f'{left} not acknowledged'}")

    def stop(self) -> None:
        self._stopping.set()
        with self._cond:
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(10)
        if self._consumer is not None:
            self._consumer.close()
        if self._producer is not None:
            self._producer.flush(10)
