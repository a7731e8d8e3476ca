"""Error handling of a task's record pipeline: retries, tolerance, error log and DLQ.

Kafka Connect's ``RetryWithToleranceOperator``: each step of a record's way through the
runtime (``KEY_CONVERTER``, ``VALUE_CONVERTER``, ``TRANSFORMATION``; Kafka's stage names) runs
through :meth:`ErrorHandler.run`. A :class:`~strom.connect.api.RetriableError` is retried with
a delay doubling from 300 ms up to ``errors.retry.delay.max.ms`` for at most
``errors.retry.timeout`` ms (0: no retry, -1: forever); a task stopping meanwhile ends the
retries with :class:`RetryInterrupted` (the record is not skipped: the next run retries it).
A failure that remains is logged when ``errors.log.enable`` (with the record's key and value
when ``errors.log.include.messages``), sent to the dead letter queue of a sink connector (``errors.deadletterqueue.topic.name``: the
record's original key, value and headers, plus Kafka's ``__connect.errors.*`` headers with
``errors.deadletterqueue.context.headers.enable``), and then with ``errors.tolerance=none``
(default) fails the task ("Tolerance exceeded in error handler", the cause chained), with
``all`` raises :class:`Tolerated` so the runtime skips that record.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from strom.connect.api import ConnectError, RetriableError
from strom.connect.config import ConfigDef, ConfigKey, at_least
from strom.connect.dlq import DeadLetterQueueReporter

LOG = logging.getLogger("strom.connect.errors")
RETRY_DELAY_MIN_S = 0.3

ERRORS_DEF = ConfigDef([
    ConfigKey("errors.retry.timeout", "LONG", 0, "MEDIUM",
              "The maximum duration in milliseconds that a failed operation will be "
              "reattempted. 0: no retries, -1: infinite retries.", group="Error Handling",
              validator=at_least(-1)),
    ConfigKey("errors.retry.delay.max.ms", "LONG", 60000, "MEDIUM",
              "The maximum duration in milliseconds between consecutive retry attempts.",
              group="Error Handling", validator=at_least(1)),
    ConfigKey("errors.tolerance", "STRING", "none", "MEDIUM",
              "Behavior for tolerating errors during connector operation. 'none' fails the "
              "task on the first error, 'all' skips problematic records.",
              group="Error Handling",
              validator=lambda v: None if v in ("none", "all") else
              "String must be one of: none, all"),
    ConfigKey("errors.log.enable", "BOOLEAN", False, "MEDIUM",
              "Log each error and the details of the failed operation.",
              group="Error Handling"),
    ConfigKey("errors.log.include.messages", "BOOLEAN", False, "MEDIUM",
              "Include the record that caused the failure in the log.", group="Error Handling"),
])
SINK_ERRORS_DEF = ERRORS_DEF.merged(ConfigDef([
    ConfigKey("errors.deadletterqueue.topic.name", "STRING", "", "MEDIUM",
              "The name of the topic to be used as the dead letter queue (DLQ) for records "
              "that fail in the sink pipeline.", group="Error Handling"),
    ConfigKey("errors.deadletterqueue.topic.replication.factor", "INT", 3, "MEDIUM",
              "Replication factor used to create the dead letter queue topic when it doesn't "
              "already exist.", group="Error Handling", validator=at_least(1)),
    ConfigKey("errors.deadletterqueue.context.headers.enable", "BOOLEAN", False, "MEDIUM",
              "If true, add headers containing error context to the messages written to the "
              "dead letter queue.", group="Error Handling"),
]))


class Tolerated(Exception):
    """The record failed, was reported, and is to be skipped (``errors.tolerance=all``)."""


class RetryInterrupted(Exception):
    """A retried step was given up because the task is stopping: the record was neither
    reported nor tolerated, and must not be counted as consumed."""


@dataclass
class Original:
    """The record as it came in (the consumed message of a sink, or a source record)."""

    topic: str
    partition: int | None
    offset: int | None
    key: Any
    value: Any
    headers: list[tuple[str, bytes | None]]
    timestamp: int | None = None


def definitions(config: dict[str, str], sink: bool) -> tuple[ConfigDef, dict[str, list[str]]]:
    """The ``errors.*`` keys for validation, and the cross-key errors (DLQ among topics)."""
    errors: dict[str, list[str]] = {}
    dlq = config.get("errors.deadletterqueue.topic.name", "").strip()
    topics = [t.strip() for t in config.get("topics", "").split(",") if t.strip()]
    if sink and dlq and dlq in topics:
        key = "errors.deadletterqueue.topic.name"
        errors[key] = [f"The DLQ topic '{dlq}' may not be included in the list of topics "
                       f"('topics={config.get('topics')}') consumed by the connector"]
    regex = config.get("topics.regex", "").strip()
    if sink and dlq and regex and _fullmatch(regex, dlq):
        errors["errors.deadletterqueue.topic.name"] = [
            f"The DLQ topic '{dlq}' may not be included in the regex matching the topics "
            f"('topics.regex={regex}') consumed by the connector"]
    return (SINK_ERRORS_DEF if sink else ERRORS_DEF), errors


def _fullmatch(regex: str, topic: str) -> bool:
    try:
        return re.fullmatch(regex, topic) is not None
    except re.error:
        return False  # reported on topics.regex itself


class ErrorHandler:
    """One per task; :meth:`begin` names the record, :meth:`run` each step of it."""

    def __init__(self, connector: str, task_id: int, config: dict[str, str], *,
                 sink: bool, client_config: dict[str, Any] | None = None,
                 stopping: threading.Event | None = None,
                 sleep: Callable[[float], Any] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        definition = SINK_ERRORS_DEF if sink else ERRORS_DEF
        parsed = definition.parse({k: v for k, v in config.items() if k in definition.keys})
        self.connector, self.task_id = connector, task_id
        self.tolerance_all = parsed["errors.tolerance"] == "all"
        self.retry_timeout_ms: int = parsed["errors.retry.timeout"]
        self.retry_delay_max_s = parsed["errors.retry.delay.max.ms"] / 1000.0
        self.log_enable: bool = parsed["errors.log.enable"]
        self.log_messages: bool = parsed["errors.log.include.messages"]
        self.stopping = stopping or threading.Event()
        self.sleep = sleep or self.stopping.wait
        self.clock = clock
        self._original: Callable[[], Original] | None = None
        self.failures = 0
        self.dlq: DeadLetterQueueReporter | None = None
        topic = parsed.get("errors.deadletterqueue.topic.name") or ""
        if sink and topic:
            self.dlq = DeadLetterQueueReporter(
                topic, parsed["errors.deadletterqueue.topic.replication.factor"],
                parsed["errors.deadletterqueue.context.headers.enable"], connector, task_id,
                client_config or {})

    def begin(self, original: Callable[[], Original]) -> None:
        """Name the record about to go through the stages (built only when one fails)."""
        self._original = original

    @property
    def original(self) -> Original | None:
        return self._original() if self._original is not None else None

    def run(self, stage: str, class_name: str, operation: Callable[[], Any]) -> Any:
        """``operation()`` with retries; on a remaining failure report, then fail or skip."""
        started = self.clock()
        delay = RETRY_DELAY_MIN_S
        while True:
            try:
                return operation()
            except RetriableError as exc:
                elapsed_ms = (self.clock() - started) * 1000
                forever = self.retry_timeout_ms < 0
                if not forever and elapsed_ms + delay * 1000 > self.retry_timeout_ms:
                    self._failed(stage, class_name, exc)
                if self.stopping.is_set():
                    # Neither reported nor skipped: the record is not consumed, and the next
                    # run of the task tries it again (errors.tolerance=all must not lose it).
                    raise RetryInterrupted(f"{stage} not retried: the task is stopping") \
                        from exc
                LOG.debug("%s-%d: retrying %s after %s", self.connector, self.task_id,
                          stage, exc)
                self.sleep(delay)
                delay = min(delay * 2, self.retry_delay_max_s)
            except Exception as exc:  # noqa: BLE001 - every failure of a stage is handled
                self._failed(stage, class_name, exc)

    def _failed(self, stage: str, class_name: str, exc: Exception) -> None:
        self.failures += 1
        if self.log_enable:
            LOG.error("Error encountered in task %s-%d. Executing stage '%s' with class '%s'%s: "
                      "%s: %s", self.connector, self.task_id, stage, class_name,
                      self._describe(), type(exc).__name__, exc)
        original = self.original
        if self.dlq is not None and original is not None:
            self.dlq.report(original, stage, class_name, exc)
        if not self.tolerance_all:
            raise ConnectError("Tolerance exceeded in error handler") from exc
        raise Tolerated(str(exc)) from exc

    def _describe(self) -> str:
        o = self.original
        if o is None:
            return ""
        where = f", where consumed record is {{topic='{o.topic}', partition={o.partition}, " \
                f"offset={o.offset}, timestamp={o.timestamp}}}" if o.offset is not None else \
                f", where source record is {{topic='{o.topic}'}}"
        if self.log_messages:
            where += f" with key={o.key!r} value={o.value!r}"
        return where

    def close(self) -> None:
        if self.dlq is not None:
            self.dlq.close()

