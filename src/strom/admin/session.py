"""Client settings and the confluent-kafka clients built from them.

A :class:`Session` is one bootstrap list seen with one set of settings: it checks the address
once (:func:`strom.admin.addresses.preflight`: a refused port, an unknown host or a connection
timeout is one specific sentence at once), then gives every client socket and metadata
timeouts of ``timeout`` seconds and routes librdkafka's own log lines to Python ``logging``
(:data:`LIBRDKAFKA_LOG`, quiet unless the application turns it up) so a failure stays one
readable sentence. The caller's librdkafka properties (``properties``: the CLI's ``-X``) are
applied last, over everything.

Producers hash keys with ``murmur2_random``, the Java client's partitioner (also
kafka-python's, the console producer's and rpk's), so a key lands on the same partition
whichever of these tools wrote it; ``partitioner`` in ``properties`` overrides it.

The AdminClient is made on first use and shared (librdkafka clients are thread-safe; the
console serves pages from a thread pool).
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from strom.admin.addresses import preflight
from strom.admin.errors import (
    InvalidInputError,
    RefusedError,
    TimedOutError,
    UnreachableError,
    describe_kafka_error,
)

T = TypeVar("T")
#: Seconds to wait for the broker before giving up (connect, metadata, admin futures).
DEFAULT_TIMEOUT_S = 10.0
#: Where librdkafka's log lines go unless a session says otherwise (quiet by default: level
#: CRITICAL is set by the applications; the CLI's ``-vv`` shows them).
LIBRDKAFKA_LOG = logging.getLogger("strom.admin.librdkafka")
#: The Java client's key hash: the same partition for a key as every Java-based tool.
DEFAULT_PARTITIONER = "murmur2_random"


@dataclass(frozen=True)
class ClientSettings:
    """How to reach the cluster and how long to wait for it.

    ``logger`` None leaves librdkafka's log lines on its own stderr; ``debug`` is librdkafka's
    ``debug`` property (e.g. ``"broker,protocol"``); ``checked`` says the address was
    checked already (no second preflight)."""

    bootstrap: str
    timeout: float = DEFAULT_TIMEOUT_S
    client_id: str = "strom-cli"
    properties: Mapping[str, str] = field(default_factory=dict)
    logger: logging.Logger | None = LIBRDKAFKA_LOG
    debug: str | None = None
    log_level: int | None = None
    checked: bool = False


def parse_properties(items: list[str]) -> dict[str, str]:
    """``K=V`` librdkafka properties (the CLI's ``-X``) as a dict."""
    result: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InvalidInputError(f"invalid -X {item!r}: expected KEY=VALUE")
        result[key.strip()] = value
    return result


class Session:
    """The clients of one :class:`ClientSettings` (see the module docstring)."""

    def __init__(self, settings: ClientSettings) -> None:
        self.settings = settings
        self._checked = settings.checked
        self._lock = threading.Lock()
        self._admin: AdminClient | None = None

    @property
    def bootstrap(self) -> str:
        return self.settings.bootstrap

    @property
    def timeout(self) -> float:
        return self.settings.timeout

    def base_config(self) -> dict[str, Any]:
        """Settings shared by producer, consumer and admin client (after a preflight)."""
        if not self._checked:
            preflight(self.bootstrap, self.timeout)
            self._checked = True
        timeout_ms = int(self.timeout * 1000)
        conf: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap,
            "client.id": self.settings.client_id,
            "socket.connection.setup.timeout.ms": max(timeout_ms, 1000),
            "socket.timeout.ms": max(timeout_ms, 10),
        }
        if self.settings.logger is not None:
            conf["logger"] = self.settings.logger  # queued, shown only if served
        if self.settings.debug:
            conf["debug"] = self.settings.debug
        if self.settings.log_level is not None:
            conf["log_level"] = self.settings.log_level
        return conf

    @property
    def admin(self) -> AdminClient:
        """The session's AdminClient (made on first use; nothing asked of the broker yet)."""
        with self._lock:
            if self._admin is None:
                conf = self.base_config()
                conf.update(self.settings.properties)
                try:
                    self._admin = AdminClient(conf)
                except KafkaException as exc:
                    raise InvalidInputError(
                        f"invalid client settings: {describe_kafka_error(exc)}"
                    ) from None
            return self._admin

    def check(self) -> None:
        """Prove the broker answers (a metadata request); an :class:`AdminError` if not."""
        self.metadata()

    def metadata(self, topic: str | None = None, client: Any = None) -> Any:
        """Cluster metadata (optionally for one topic) from ``client`` (default the admin
        client), failing clearly if the broker is away."""
        client = self.admin if client is None else client
        try:
            if topic is None:
                return client.list_topics(timeout=self.timeout)
            return client.list_topics(topic, timeout=self.timeout)
        except KafkaException as exc:
            err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            if err is not None and err.code() in (KafkaError._TRANSPORT, KafkaError._TIMED_OUT):
                raise TimedOutError(
                    f"cannot reach the broker at {self.bootstrap}: it accepts connections "
                    f"but gave no Kafka answer within {self.timeout:g} s "
                    f"({describe_kafka_error(exc)})"
                ) from None
            raise UnreachableError(
                f"cannot reach the broker at {self.bootstrap}: {describe_kafka_error(exc)}"
            ) from None

    def wait(self, future: concurrent.futures.Future[Any], what: str,
             wait: float | None = None) -> Any:  # fmt: skip
        """The result of an AdminClient future, or an :class:`AdminError` naming ``what``."""
        seconds = self.timeout + 1.0 if wait is None else wait  # request_timeout + a margin
        try:
            return future.result(timeout=seconds)
        except concurrent.futures.TimeoutError:
            raise TimedOutError(
                f"{what}: no answer from the broker at {self.bootstrap} within {seconds:g} s"
            ) from None
        except KafkaException as exc:
            raise RefusedError(f"{what}: {describe_kafka_error(exc)}") from None
        except (ValueError, TypeError) as exc:
            raise InvalidInputError(f"{what}: {exc}") from None

    def guarded(self, what: str, call: Callable[[], T]) -> T:
        """Run ``call``; the client's exceptions become an :class:`AdminError` about ``what``."""
        try:
            return call()
        except KafkaException as exc:
            raise RefusedError(f"{what}: {describe_kafka_error(exc)}") from None
        except (ValueError, TypeError) as exc:
            raise InvalidInputError(f"{what}: {exc}") from None

    def producer(self, extra: Mapping[str, Any], **callbacks: Any) -> Producer:
        """A Producer: the common settings, murmur2 keys, ``extra``, then the caller's
        properties. ``callbacks`` are confluent-kafka's (``error_cb`` ...)."""
        conf = self.base_config()
        conf["partitioner"] = DEFAULT_PARTITIONER
        conf.update(extra)
        conf.update(self.settings.properties)
        conf.update(callbacks)
        try:
            return Producer(conf)
        except KafkaException as exc:
            raise InvalidInputError(
                f"invalid producer settings: {describe_kafka_error(exc)}"
            ) from None

    def consumer(self, extra: Mapping[str, Any], group_prefix: str = "strom-cli") -> Consumer:
        """A Consumer with the common settings plus ``extra`` (a throwaway group by default,
        nothing committed automatically), then the caller's properties."""
        conf = self.base_config()
        conf.update({
            "group.id": f"{group_prefix}-{uuid.uuid4().hex[:12]}",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        })  # fmt: skip
        conf.update(extra)
        conf.update(self.settings.properties)
        try:
            return Consumer(conf)
        except KafkaException as exc:
            raise InvalidInputError(
                f"invalid consumer settings: {describe_kafka_error(exc)}"
            ) from None

    def close(self) -> None:
        with self._lock:
            self._admin = None

