"""All partition logs of one data directory.

Layout: ``<data_dir>/<topic>-<partition>/`` per partition (topic names may contain '-' and
'.', so the partition is after the LAST '-'), plus ``<data_dir>/.lock``, held with an
exclusive ``flock`` for the manager's lifetime so two brokers cannot share a directory.
"""

from __future__ import annotations

import fcntl
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from strom.clock import Clock
from strom.storage.errors import LogDirLockedError
from strom.storage.flusher import INLINE, Flusher
from strom.storage.log import Log
from strom.storage.log_config import LogConfig
from strom.storage.maintenance import MaintenanceSchedule
from strom.storage.producer_state import DEFAULT_EXPIRATION_MS

logger = logging.getLogger(__name__)

LOCK_FILE = ".lock"
TopicPartition = tuple[str, int]


def parse_log_dir_name(name: str) -> TopicPartition | None:
    """``"my-topic.v1-3"`` → ``("my-topic.v1", 3)``; None for anything else."""
    topic, sep, part = name.rpartition("-")
    if not sep or not topic or not part.isdigit():
        return None
    return topic, int(part)


class LogManager:
    """Opens, creates, deletes and maintains the logs under ``data_dir``."""

    def __init__(self, data_dir: Path, clock: Clock, broker_configs: Mapping[str, str],
                 flusher: Flusher | None = None) -> None:  # fmt: skip
        """``flusher`` runs the logs' fsyncs and checkpoint writes (the broker passes a
        background :class:`Flusher`, owned from then on; by default they run inline)."""
        self.data_dir = Path(data_dir)
        self.flusher = flusher if flusher is not None else INLINE
        self._schedule: MaintenanceSchedule[TopicPartition] = MaintenanceSchedule()
        self.clock = clock
        self.broker_configs = dict(broker_configs)
        self._logs: dict[TopicPartition, Log] = {}
        self._overrides: dict[str, dict[str, str]] = {}
        self.producer_id_expiration_ms = int(
            self.broker_configs.get("producer.id.expiration.ms", DEFAULT_EXPIRATION_MS)
        )
        self.producer_id_check_interval_ms = int(
            self.broker_configs.get("producer.id.expiration.check.interval.ms", 600_000)
        )
        self._last_producer_check = clock.monotonic()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._lock_fd = os.open(self.data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            self._lock_fd = -1
            raise LogDirLockedError(f"{self.data_dir} is in use by another broker") from None

    def _config(self, topic: str) -> LogConfig:
        return LogConfig.from_configs(self._overrides.get(topic, {}), self.broker_configs)

    def load(self, topic_overrides: Callable[[str], Mapping[str, str]]) -> None:
        """Open every ``<topic>-<partition>`` directory (running recovery where needed)."""
        for path in sorted(self.data_dir.iterdir()):
            tp = parse_log_dir_name(path.name) if path.is_dir() else None
            if tp is None or tp in self._logs:
                continue
            topic, partition = tp
            if topic not in self._overrides:
                self._overrides[topic] = dict(topic_overrides(topic))
            self._logs[tp] = self._open(tp, path, self._config(topic))
            logger.info("loaded log %s (end offset %d)", path.name, self._logs[tp].log_end_offset)

    def _open(self, tp: TopicPartition, path: Path, config: LogConfig) -> Log:
        log = Log.open(path, config, self.clock, flusher=self.flusher,
                       producer_id_expiration_ms=self.producer_id_expiration_ms)  # fmt: skip
        touch = self._schedule.touch
        log.on_change = lambda: touch(tp)
        touch(tp)
        return log

    def get(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def create(self, topic: str, partition: int, overrides: Mapping[str, str]) -> Log:
        """Open (creating) the log; validates ``overrides`` (InvalidConfigError)."""
        config = LogConfig.from_configs(overrides, self.broker_configs)
        self._overrides[topic] = dict(overrides)
        existing = self._logs.get((topic, partition))
        if existing is not None:
            existing.update_config(config)
            return existing
        log = self._open((topic, partition), self.data_dir / f"{topic}-{partition}", config)
        self._logs[(topic, partition)] = log
        return log

    def delete(self, topic: str, partition: int) -> None:
        log = self._logs.pop((topic, partition), None)
        self._schedule.remove((topic, partition))
        if log is not None:
            log.on_change = None
            log.delete()

    def update_topic_config(self, topic: str, overrides: Mapping[str, str]) -> None:
        """Apply new overrides to every partition of ``topic`` (validated first)."""
        config = LogConfig.from_configs(overrides, self.broker_configs)
        self._overrides[topic] = dict(overrides)
        for (t, _p), log in self._logs.items():
            if t == topic:
                log.update_config(config)  # which touches its maintenance schedule

    def update_broker_configs(self, broker_configs: Mapping[str, str]) -> None:
        """New broker properties (a dynamic broker config changed): every log gets its config
        again from its topic's overrides and these defaults. Validated before anything
        changes (InvalidConfigError)."""
        configs = dict(broker_configs)
        new = {topic: LogConfig.from_configs(o, configs) for topic, o in self._overrides.items()}
        self.broker_configs = configs
        for (topic, _p), log in self._logs.items():
            config = new.get(topic)
            log.update_config(config if config is not None else self._config(topic))

    def logs(self) -> Iterator[tuple[TopicPartition, Log]]:
        yield from list(self._logs.items())

    def maintenance(self) -> int:
        """Periodic work: segment.ms rolls, retention, file.delete.delay.ms deletions, flush.ms,
        for the logs that changed or have a deadline due (:mod:`strom.storage.maintenance`);
        producer id expiry over every log each ``producer.id.expiration.check.interval.ms``
        (as Kafka). Errors stay per log. Returns how many logs were visited."""
        now = self.clock.monotonic()
        if (now - self._last_producer_check) * 1000 >= self.producer_id_check_interval_ms:
            self._last_producer_check = now
            for _tp, log in self.logs():
                log.remove_expired_producers()
        visited = 0
        for tp in self._schedule.take_due(now):
            found = self._logs.get(tp)
            if found is None:
                continue
            log = found
            visited += 1
            try:
                log.maybe_roll_by_time()
                log.enforce_retention()
                log.delete_due_files()
                log.maybe_flush_by_time()
            except OSError:
                logger.exception("maintenance failed for %s-%d", *tp)
            self._schedule.schedule(tp, log.next_maintenance())
        return visited

    def flush_all(self) -> None:
        for _tp, log in self.logs():
            log.flush()

    def close_all(self) -> None:
        """Close every log cleanly and release the directory lock."""
        self.flusher.drain()
        for _tp, log in self.logs():
            log.close()
        self._logs.clear()
        self.flusher.close()
        if self._lock_fd >= 0:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = -1
