"""All partition logs of one data directory.

Layout: ``<data_dir>/<topic>-<partition>/`` per partition (topic names may contain '-' and
'.', so the partition is after the LAST '-'), plus ``<data_dir>/.lock``, held with an
exclusive ``flock`` for the manager's lifetime so two brokers cannot share a directory.
A directory being removed is first renamed ``<topic>-<partition>.<hex>-delete`` (Kafka's
suffix), so a crash in the middle of its removal never leaves half a log under a live name;
such directories are removed again at the next start. The directory-level checkpoint and
clean-shutdown marker are described in :mod:`strom.storage.log_dir`.

Creating partitions is two steps so that a batch is all or nothing and the slow part can run
on a worker thread: :meth:`LogManager.create_logs` (thread-safe, touches no shared state)
makes every directory and empty segment or removes all it made and raises; the event loop then
registers the logs with :meth:`LogManager.add`. Deleting is the reverse: :meth:`detach` on
the loop, then :func:`remove_log` on a thread.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from strom.clock import Clock
from strom.storage import log_dir
from strom.storage.errors import LogDirLockedError
from strom.storage.flusher import INLINE, Flusher
from strom.storage.log import Log
from strom.storage.log_config import LogConfig
from strom.storage.maintenance import MaintenanceSchedule
from strom.storage.producer_state import DEFAULT_EXPIRATION_MS

logger = logging.getLogger(__name__)

LOCK_FILE = ".lock"
LOAD_THREADS = 4
DELETE_SUFFIX = "-delete"
TopicPartition = tuple[str, int]


def doomed_name(path: Path) -> Path:
    """Where a log directory goes while it is removed: ``<name>.<hex>-delete``."""
    return path.with_name(f"{path.name}.{uuid.uuid4().hex}{DELETE_SUFFIX}")


def remove_log(log: Log) -> None:
    """Close ``log``'s files, rename its directory out of the way, remove it (a thread's job)."""
    log.close_files()
    try:
        doomed = doomed_name(log.dir)
        os.rename(log.dir, doomed)
    except OSError:
        doomed = log.dir
    shutil.rmtree(doomed, ignore_errors=True)


def remove_dirs(paths: Iterable[Path]) -> None:
    """Remove directories (stray or doomed logs), renaming live-looking names first."""
    for path in paths:
        if not path.name.endswith(DELETE_SUFFIX):
            try:
                target = doomed_name(path)
                os.rename(path, target)
                path = target
            except OSError:
                pass
        shutil.rmtree(path, ignore_errors=True)


def parse_log_dir_name(name: str) -> TopicPartition | None:
    """``"my-topic.v1-3"`` → ``("my-topic.v1", 3)``; None for anything else."""
    topic, sep, part = name.rpartition("-")
    if not sep or not topic or not part.isdigit():
        return None
    return topic, int(part)


def _is_dir(entry: os.DirEntry[str]) -> bool:
    """A directory entry to consider; one that cannot even be inspected (a symlink loop, an
    I/O error) is skipped with a warning rather than stopping the broker from starting."""
    try:
        return entry.is_dir()
    except OSError as exc:
        logger.warning("ignoring %s in the data directory: %s", entry.path, exc)
        return False


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
        self._expiry_sweep: list[TopicPartition] = []  # logs still to check for expired ids
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

    def load(
        self,
        topic_overrides: Callable[[str], Mapping[str, str]],
        hosted: Callable[[str, int], bool] = lambda _t, _p: True,
    ) -> list[Path]:
        """Open every ``<topic>-<partition>`` directory that ``hosted`` names (running
        recovery where needed). Returns the directories to remove: those of partitions not
        hosted (left by a creation or deletion a crash interrupted; renamed ``-delete``
        here) and those already renamed ``-delete``. The caller removes them off the loop."""
        started = time.monotonic()
        doomed: list[Path] = []
        clean = log_dir.take_clean_marker(self.data_dir)
        points = log_dir.read_offsets(self.data_dir / log_dir.RECOVERY_POINT_FILE)
        configs: dict[str, LogConfig] = {}
        todo: list[tuple[TopicPartition, Path]] = []
        with os.scandir(self.data_dir) as entries:
            names = sorted(e.name for e in entries if _is_dir(e))
        for name in names:
            path = self.data_dir / name
            if name.endswith(DELETE_SUFFIX):
                doomed.append(path)
                continue
            tp = parse_log_dir_name(name)
            if tp is None or tp in self._logs:
                continue
            topic, partition = tp
            if not hosted(topic, partition):
                logger.warning("removing the log directory %s of no hosted partition", name)
                target = doomed_name(path)
                os.rename(path, target)
                doomed.append(target)
                continue
            if topic not in configs:
                self._overrides[topic] = dict(topic_overrides(topic))
                configs[topic] = self._config(topic)
            todo.append((tp, path))

        def open_one(item: tuple[TopicPartition, Path]) -> Log:
            tp, path = item
            return Log.open(path, configs[tp[0]], self.clock, clean=clean,
                            recovery_point=points.get(tp, 0), flusher=self.flusher,
                            producer_id_expiration_ms=self.producer_id_expiration_ms)  # fmt: skip

        # Opening is mostly system calls (list, open, read): a few threads overlap them, as
        # Kafka's num.recovery.threads.per.data.dir.
        with ThreadPoolExecutor(LOAD_THREADS, thread_name_prefix="strom-log-load") as pool:
            opened = list(pool.map(open_one, todo))
        recovered = 0
        for (tp, path), log in zip(todo, opened, strict=True):
            self._register(tp, log)
            if log.recovered:
                recovered += 1
                logger.info("recovered log %s (%d segments re-validated, end offset %d)",
                            path.name, log.recovered, log.log_end_offset)  # fmt: skip
        logger.info(
            "loaded %d logs in %.2fs (%d recovered, %d clean; last shutdown %s)",
            len(self._logs), time.monotonic() - started, recovered, len(self._logs) - recovered,
            "clean" if clean else "not clean",
        )
        return doomed

    def _open(self, tp: TopicPartition, path: Path, config: LogConfig) -> Log:
        log = Log.open(path, config, self.clock, flusher=self.flusher,
                       producer_id_expiration_ms=self.producer_id_expiration_ms)  # fmt: skip
        self._register(tp, log)
        return log

    def _register(self, tp: TopicPartition, log: Log) -> None:
        """Serve ``log`` as ``tp`` and put it on the maintenance schedule (owner's thread)."""
        self._logs[tp] = log
        touch = self._schedule.touch
        log.on_change = lambda: touch(tp)
        touch(tp)

    def count(self) -> int:
        """How many logs are registered."""
        return len(self._logs)

    def get(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def create_logs(
        self, topic: str, partitions: Iterable[int], overrides: Mapping[str, str]
    ) -> list[Log]:
        """Create new empty logs for ``partitions`` of ``topic``, all or none (thread-safe:
        reads no shared state). On any error every directory made is removed and the error
        raised. Directories already present (left by a crash) are removed first: a partition
        being created has no data. The data directory is fsynced once at the end."""
        config = LogConfig.from_configs(overrides, self.broker_configs)
        made: list[Log] = []
        try:
            for partition in partitions:
                path = self.data_dir / f"{topic}-{partition}"
                if path.exists():
                    remove_dirs([path])
                made.append(Log.create(path, config, self.clock, flusher=self.flusher,
                                       producer_id_expiration_ms=self.producer_id_expiration_ms))  # fmt: skip
            log_dir.fsync_dir(self.data_dir)
        except BaseException:
            for log in made:
                remove_log(log)
            raise
        return made

    def add(self, topic: str, logs: Iterable[Log], overrides: Mapping[str, str]) -> None:
        """Register logs made by :meth:`create_logs` (on the owner's thread)."""
        self._overrides[topic] = dict(overrides)
        for log in logs:
            tp = parse_log_dir_name(log.dir.name)
            assert tp is not None and tp[0] == topic
            self._register(tp, log)

    def detach(self, topic: str, partition: int) -> Log | None:
        """Unregister a log (no more reads or appends); the caller removes it with
        :func:`remove_log`, off the event loop."""
        self._schedule.remove((topic, partition))
        log = self._logs.pop((topic, partition), None)
        if log is not None:
            log.on_change = None
        return log

    def create(self, topic: str, partition: int, overrides: Mapping[str, str]) -> Log:
        """Open (creating) the log; validates ``overrides`` (InvalidConfigError)."""
        config = LogConfig.from_configs(overrides, self.broker_configs)
        self._overrides[topic] = dict(overrides)
        existing = self._logs.get((topic, partition))
        if existing is not None:
            existing.update_config(config)
            return existing
        return self._open((topic, partition), self.data_dir / f"{topic}-{partition}", config)

    def delete(self, topic: str, partition: int) -> None:
        log = self.detach(topic, partition)
        if log is not None:
            remove_log(log)

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

    def maintenance(self, limit: int | None = None) -> int:
        """Periodic work: segment.ms rolls, retention, file.delete.delay.ms deletions, flush.ms,
        for the logs that changed or have a deadline due (:mod:`strom.storage.maintenance`);
        producer id expiry over every log each ``producer.id.expiration.check.interval.ms``
        (as Kafka). Errors stay per log. Returns how many logs were visited.

        With ``limit``, at most that many logs are visited (and at most that many swept for
        expired producers): the rest wait for the next call, and :meth:`maintenance_backlog`
        says whether the caller should make it soon. The broker calls it in slices, yielding
        to the event loop in between, so no tick stalls requests for all partitions at once."""
        now = self.clock.monotonic()
        if (not self._expiry_sweep
                and (now - self._last_producer_check) * 1000 >= self.producer_id_check_interval_ms):  # fmt: skip
            self._last_producer_check = now
            self._expiry_sweep = list(self._logs)
        if self._expiry_sweep:
            sweep = self._expiry_sweep
            count = len(sweep) if limit is None else min(limit, len(sweep))
            for tp in sweep[len(sweep) - count :]:
                swept = self._logs.get(tp)
                if swept is not None:
                    swept.remove_expired_producers()
            del sweep[len(sweep) - count :]
        visited = 0
        for tp in self._schedule.take_due(now, limit):
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

    def maintenance_backlog(self) -> bool:
        """Whether work is left that a ``limit``-ed :meth:`maintenance` call did not do."""
        return self._schedule.backlog() or bool(self._expiry_sweep)

    def recovery_points(self) -> dict[TopicPartition, int]:
        """Every log's recovery point now (build on the owner's thread, write anywhere with
        :func:`strom.storage.log_dir.write_offsets`)."""
        return {tp: log.recovery_point for tp, log in self._logs.items()}

    def checkpoint_recovery_points(self, points: Mapping[TopicPartition, int]) -> None:
        """Write the data directory's recovery-point checkpoint (thread-safe)."""
        log_dir.write_offsets(self.data_dir / log_dir.RECOVERY_POINT_FILE, points)

    def checkpoint_recovery_points_async(self) -> Future[None]:
        """Have the flusher write the data directory's recovery-point checkpoint with every
        log's recovery point now (each moved by the flusher only after its fsync; the file is
        written after the jobs queued before, and never at the same time as shutdown's)."""
        points = self.recovery_points()
        return self.flusher.submit(lambda: self.checkpoint_recovery_points(points))

    def flush_all(self) -> None:
        for _tp, log in self.logs():
            log.flush()

    def close_all(self) -> None:
        """Close every log cleanly and release the directory lock.

        Queued flusher work runs first. Per-file fsyncs and renames cost about a millisecond
        each, several per log: so the logs write without them, one ``syncfs`` makes it all
        durable, then the directory's recovery-point checkpoint and clean-shutdown marker are
        written (:mod:`strom.storage.log_dir`). A log that fails to close leaves the marker
        out: every log is then checked at the next start, from its recovery point."""
        started = time.monotonic()
        self.flusher.drain()
        points: dict[TopicPartition, int] = {}
        failed = 0
        for tp, log in self.logs():
            try:
                log.close(sync=False)
                points[tp] = log.recovery_point
            except OSError:
                failed += 1
                logger.exception("closing the log in %s failed", log.dir)
        self.flusher.drain()  # jobs a close queued (none expected) before the one sync
        if points or failed:
            log_dir.sync_filesystem(self.data_dir)
            log_dir.write_offsets(self.data_dir / log_dir.RECOVERY_POINT_FILE, points)
            if not failed:
                log_dir.write_clean_marker(self.data_dir)
            logger.info("closed %d logs in %.2fs", len(points), time.monotonic() - started)
        self._logs.clear()
        self.flusher.close()
        if self._lock_fd >= 0:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = -1
