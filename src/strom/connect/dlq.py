"""The dead letter queue of a sink connector (Kafka's ``DeadLetterQueueReporter``).

A failed record is produced to ``errors.deadletterqueue.topic.name`` as it was consumed
(original key and value bytes, original headers). With context headers enabled, Kafka's
headers are added, UTF-8 strings: ``__connect.errors.topic``, ``.partition``, ``.offset``,
``.connector.name``, ``.task.id``, ``.stage``, ``.class.name``, ``.exception.class.name``,
``.exception.message``, ``.exception.stacktrace``. The exception is the cause the stage raised
(a Python class name where Kafka names a Java one).

The topic is created on first use with one partition and the configured replication factor,
reduced to the number of brokers when the cluster has fewer (Kafka's default of 3 cannot be
met by a single node; a log line says so). Each report waits for the broker's acknowledgement
before the runtime goes on, so a record whose offset is committed is in the DLQ.
"""

from __future__ import annotations

import logging
import traceback
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from strom.connect.api import ConnectError

LOG = logging.getLogger("strom.connect.dlq")
PREFIX = "__connect.errors."


def _exception_class(exc: BaseException) -> str:
    cls = type(exc)
    return cls.__qualname__ if cls.__module__ == "builtins" else \
        f"{cls.__module__}.{cls.__qualname__}"


class DeadLetterQueueReporter:
    def __init__(self, topic: str, replication_factor: int, context_headers: bool,
                 connector: str, task_id: int, client_config: dict[str, Any]) -> None:
        self.topic = topic
        self.replication_factor = replication_factor
        self.context_headers = context_headers
        self.connector = connector
        self.task_id = task_id
        # the address, the id and the security settings (producer.*'s, as Kafka's DLQ
        # producer); nothing else of a task's producer (its acks, batching, idempotence)
        self.client_config = {k: v for k, v in client_config.items()
                              if k in ("bootstrap.servers", "client.id", "security.protocol")
                              or k.startswith(("ssl.", "sasl."))}
        self.producer: Producer | None = None

    def _open(self) -> Producer:
        if self.producer is None:
            self._ensure_topic()
            self.producer = Producer({**self.client_config, "acks": "all", "linger.ms": 0})
        return self.producer

    def _ensure_topic(self) -> None:
        admin = AdminClient(self.client_config)
        metadata = admin.list_topics(timeout=15)
        if self.topic in metadata.topics and metadata.topics[self.topic].error is None:
            return
        rf = min(self.replication_factor, max(len(metadata.brokers), 1))
        if rf < self.replication_factor:
            LOG.warning("DLQ topic %s: replication factor %d reduced to %d (brokers in the "
                        "cluster)", self.topic, self.replication_factor, rf)
        futures = admin.create_topics([NewTopic(self.topic, 1, rf)], operation_timeout=15)
        try:
            futures[self.topic].result(30)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise ConnectError(f"Could not create the DLQ topic {self.topic}: "
                                   f"{exc}") from None
        LOG.info("created DLQ topic %s", self.topic)

    def headers(self, original: Any, stage: str, class_name: str, exc: BaseException
                ) -> list[tuple[str, bytes]]:
        values = {
            "topic": original.topic,
            "partition": original.partition,
            "offset": original.offset,
            "connector.name": self.connector,
            "task.id": self.task_id,
            "stage": stage,
            "class.name": class_name,
            "exception.class.name": _exception_class(exc),
            "exception.message": str(exc),
            "exception.stacktrace": "".join(traceback.format_exception(exc)),
        }
        return [(PREFIX + k, str(v).encode()) for k, v in values.items() if v is not None]

    def report(self, original: Any, stage: str, class_name: str, exc: BaseException) -> None:
        producer = self._open()
        headers = list(original.headers or [])
        if self.context_headers:
            headers += self.headers(original, stage, class_name, exc)
        failures: list[KafkaError] = []

        def delivered(err: KafkaError | None, _msg: Any) -> None:
            if err is not None:
                failures.append(err)

        producer.produce(self.topic, key=original.key, value=original.value,
                         headers=headers, on_delivery=delivered)
        if producer.flush(30) or failures:
            reason = failures[0] if failures else "not acknowledged"
            raise ConnectError(f"Could not write to the DLQ topic {self.topic}: {reason}")

    def close(self) -> None:
        if self.producer is not None:
            self.producer.flush(10)
            self.producer = None
