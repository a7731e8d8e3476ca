"""All partition logs of a broker's log directories (Kafka's ``log.dirs``).

Layout, in each log directory: ``<dir>/<topic>-<partition>/`` per partition (topic names may
contain '-' and '.', so the partition is after the LAST '-'), plus ``<dir>/.lock``, held with
an exclusive ``flock`` for the manager's lifetime so two brokers cannot share a directory.
Every directory has its own recovery-point checkpoint and clean-shutdown marker; a partition
lives in exactly one of them (two live copies are a fatal start-up error, as in Kafka). A new
partition goes to the directory with the fewest partitions (Kafka's default placement). With
one directory (the default: the broker's ``--data-dir``) nothing differs from a single-dir
layout. ``<topic>-<partition>.<hex>-future`` directories are replicas being moved to another
directory (:mod:`strom.storage.log_move`).
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

import contextlib
import fcntl
import functools
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from strom.clock import Clock
from strom.storage import atomic_file, log_dir
from strom.storage.errors import (
    DiskError,
    DuplicateLogDirError,
    KafkaStorageError,
    LogDirLockedError,
    StorageError,
)
from strom.storage.flusher import INLINE, Flusher
from strom.storage.log import Log
from strom.storage.log_config import LogConfig
from strom.storage.log_dir_failures import LogDirFailures
from strom.storage.maintenance import MaintenanceSchedule
from strom.storage.producer_state import DEFAULT_EXPIRATION_MS
from strom.storage.slow_disk import DiskSpeed, WriterPool

logger = logging.getLogger(__name__)

LOCK_FILE = ".lock"
#: a change of the wall clock against the monotonic one larger than this is a step
WALL_STEP_MS = 1000
LOAD_THREADS = 4
DELETE_SUFFIX = "-delete"
FUTURE_SUFFIX = "-future"
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


def future_name(path: Path) -> Path:
    """Where a replica moved into ``path``'s log directory is copied: ``<name>.<hex>-future``."""
    return path.with_name(f"{path.name}.{uuid.uuid4().hex}{FUTURE_SUFFIX}")


def parse_future_name(name: str) -> TopicPartition | None:
    """``"t-3.<hex>-future"`` → ``("t", 3)``; None for anything else."""
    if not name.endswith(FUTURE_SUFFIX):
        return None
    base, dot, _rest = name[: -len(FUTURE_SUFFIX)].rpartition(".")
    return parse_log_dir_name(base) if dot else None


def parse_doomed_name(name: str) -> TopicPartition | None:
    """``"t-3.<hex>-delete"`` → ``("t", 3)``; None for anything else."""
    if not name.endswith(DELETE_SUFFIX):
        return None
    base, dot, _rest = name[: -len(DELETE_SUFFIX)].rpartition(".")
    return parse_log_dir_name(base) if dot else None


def _mtime(path: Path) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return 0


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

    def __init__(self, data_dirs: Path | Sequence[Path], clock: Clock,
                 broker_configs: Mapping[str, str], flusher: Flusher | None = None) -> None:  # fmt: skip
        """``data_dirs``: the log directories (one path or several, Kafka's ``log.dirs``);
        ``flusher`` runs the logs' fsyncs and checkpoint writes (the broker passes a
        background :class:`Flusher`, owned from then on; by default they run inline)."""
        dirs = [Path(data_dirs)] if isinstance(data_dirs, (str, Path)) else list(data_dirs)
        if not dirs:
            raise ValueError("no log directory")
        self.dirs: list[Path] = dirs
        self.data_dir = dirs[0]  # the first log directory (the only one by default)
        self.flusher = flusher if flusher is not None else INLINE
        self._schedule: MaintenanceSchedule[TopicPartition] = MaintenanceSchedule()
        self._hw_changed: dict[TopicPartition, Log | None] = {}  # see take_hw_changed
        self._compacted: dict[TopicPartition, Log] = {}  # see compacted_logs
        self.clock = clock
        self.broker_configs = dict(broker_configs)
        self._logs: dict[TopicPartition, Log] = {}
        self._counts: dict[Path, int] = {d: 0 for d in dirs}  # registered logs per directory
        # -future copies of moves to resume (found by load(); the broker takes them)
        self.futures: dict[TopicPartition, Path] = {}
        self._overrides: dict[str, dict[str, str]] = {}
        self.producer_id_expiration_ms = int(
            self.broker_configs.get("producer.id.expiration.ms", DEFAULT_EXPIRATION_MS)
        )
        self.producer_id_check_interval_ms = int(
            self.broker_configs.get("producer.id.expiration.check.interval.ms", 600_000)
        )
        self._last_producer_check = clock.monotonic()
        self._expiry_sweep: list[TopicPartition] = []  # logs still to check for expired ids
        self._wall_offset: float | None = None  # wall minus monotonic ms at the last tick
        #: disk errors and offline directories (:mod:`strom.storage.log_dir_failures`)
        self.failures = LogDirFailures(dirs)
        self.failures.listeners.append(self._stop_dir_logs)
        #: partitions whose log directory went offline, with that directory (until restart)
        self.offline_logs: dict[TopicPartition, Path] = {}
        #: whether each log directory is slow now, and the threads that write its clients'
        #: appends while it is (:mod:`strom.storage.slow_disk`)
        self.speeds: dict[Path, DiskSpeed] = {d: DiskSpeed(str(d)) for d in dirs}
        self.writers = WriterPool()
        self._lock_fds: list[int] = []
        try:
            for d in dirs:
                d.mkdir(parents=True, exist_ok=True)
                fd = os.open(d / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    raise LogDirLockedError(f"{d} is in use by another broker") from None
                self._lock_fds.append(fd)
        except BaseException:
            self._unlock()
            raise

    def _unlock(self) -> None:
        for fd in self._lock_fds:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
        self._lock_fds = []

    def speed_of(self, log_dir: Path) -> DiskSpeed:
        """Whether ``log_dir`` is slow now (:mod:`strom.storage.slow_disk`)."""
        speed = self.speeds.get(log_dir)
        if speed is None:  # not one of log.dirs (a test's own layout): its own
            speed = self.speeds[log_dir] = DiskSpeed(str(log_dir))
        return speed

    def dir_of(self, log: Log) -> Path:
        """The log directory holding ``log``."""
        return log.dir.parent

    def partition_counts(self) -> dict[Path, int]:
        """How many logs each log directory holds (registered ones)."""
        return dict(self._counts)

    def next_dirs(self, count: int) -> list[Path]:
        """The directories for ``count`` new partitions, each going where the fewest
        partitions are (counting the ones placed before it; ties: the order of ``log.dirs``),
        as Kafka's ``nextLogDirs``; offline directories are left out (KAFKA_STORAGE_ERROR
        when none is left). Thread-safe: reads a snapshot of the counts."""
        online = self.failures.online()
        if not online:
            raise KafkaStorageError("every log directory is offline")
        if len(online) == 1:
            return [online[0]] * count
        counts = dict(self._counts)
        out: list[Path] = []
        for _ in range(count):
            best = min(online, key=lambda d: counts[d])
            counts[best] += 1
            out.append(best)
        return out

    def _config(self, topic: str) -> LogConfig:
        return LogConfig.from_configs(self._overrides.get(topic, {}), self.broker_configs)

    def load(
        self,
        topic_overrides: Callable[[str], Mapping[str, str]],
        hosted: Callable[[str, int], bool] = lambda _t, _p: True,
    ) -> list[Path]:
        """Open every ``<topic>-<partition>`` directory of every log directory that
        ``hosted`` names (running recovery where needed). Returns the directories to remove:
        those of partitions not hosted (left by a creation or deletion a crash interrupted;
        renamed ``-delete`` here), those already renamed ``-delete``, and ``-future`` copies
        of partitions not hosted any more. A ``-future`` copy of a partition that is live in
        another directory is a move a crash or a shutdown interrupted: it is kept in
        :attr:`futures` for the broker to resume (Kafka keeps its future logs); of several for
        one partition (a move redirected just before a crash) the newest is kept. A future
        replica of a hosted partition with no live directory left (the move crashed between
        its two renames: the source is ``-delete`` already) is renamed to the live name and
        opened. A partition live in two directories raises :class:`DuplicateLogDirError`, as
        Kafka refuses to start."""
        started = time.monotonic()
        doomed: list[Path] = []
        configs: dict[str, LogConfig] = {}
        todo: list[tuple[TopicPartition, Path, bool, int]] = []
        where: dict[TopicPartition, Path] = {}
        futures: list[tuple[TopicPartition, Path]] = []
        clean_dirs: dict[Path, bool] = {}
        for data_dir in self.dirs:
            clean = log_dir.take_clean_marker(data_dir)
            clean_dirs[data_dir] = clean
            points = log_dir.read_offsets(data_dir / log_dir.RECOVERY_POINT_FILE)
            with os.scandir(data_dir) as entries:
                names = sorted(e.name for e in entries if _is_dir(e))
            for name in names:
                path = data_dir / name
                if name.endswith(DELETE_SUFFIX):
                    doomed.append(path)
                    continue
                future = parse_future_name(name)
                if future is not None:
                    futures.append((future, path))
                    continue
                tp = parse_log_dir_name(name)
                if tp is None or tp in self._logs:
                    continue
                topic, partition = tp
                if not hosted(topic, partition):
                    logger.warning("removing the log directory %s of no hosted partition", path)
                    target = doomed_name(path)
                    os.rename(path, target)
                    doomed.append(target)
                    continue
                if tp in where:
                    raise DuplicateLogDirError(
                        f"duplicate log directories for {topic}-{partition} in {where[tp]} and"
                        f" {data_dir}: remove the one that is known to be stale and restart")
                where[tp] = data_dir
                if topic not in configs:
                    self._overrides[topic] = dict(topic_overrides(topic))
                    configs[topic] = self._config(topic)
                todo.append((tp, path, clean, points.get(tp, 0)))
        futures.sort(key=lambda item: _mtime(item[1]), reverse=True)  # newest first
        seen: set[TopicPartition] = set()
        for tp, path in futures:
            live_in = where.get(tp)
            if live_in is None and tp in self._logs:
                live_in = self._logs[tp].dir.parent
            if not hosted(*tp) or live_in == path.parent or tp in seen:
                logger.warning("removing %s: a copy for a move to another log directory"
                               " that will not resume", path)  # fmt: skip
                doomed.append(path)
                continue
            seen.add(tp)
            if live_in is not None:
                logger.info("keeping %s to resume the move of %s-%d from %s", path.name, *tp,
                            live_in)  # fmt: skip
                self.futures[tp] = path
                continue
            live = path.with_name(f"{tp[0]}-{tp[1]}")
            if not any(parse_doomed_name(d.name) == tp for d in doomed):
                logger.error("%s-%d has no live directory and no -delete one: promoting its"
                             " future copy %s, which may be incomplete (was a log directory"
                             " removed from log.dirs?)", *tp, path)  # fmt: skip
            logger.warning("completing the move of %s-%d into %s", *tp, path.parent)
            os.rename(path, live)
            atomic_file.fsync_path(path.parent)
            where[tp] = path.parent
            if tp[0] not in configs:
                self._overrides[tp[0]] = dict(topic_overrides(tp[0]))
                configs[tp[0]] = self._config(tp[0])
            todo.append((tp, live, False, 0))

        def open_one(item: tuple[TopicPartition, Path, bool, int]) -> Log:
            tp, path, clean, point = item
            return Log.open(path, configs[tp[0]], self.clock, clean=clean,
                            recovery_point=point, flusher=self.flusher,
                            producer_id_expiration_ms=self.producer_id_expiration_ms)  # fmt: skip

        # Opening is mostly system calls (list, open, read): a few threads overlap them, as
        # Kafka's num.recovery.threads.per.data.dir.
        with ThreadPoolExecutor(LOAD_THREADS, thread_name_prefix="strom-log-load") as pool:
            opened = list(pool.map(open_one, todo))
        recovered = 0
        for (tp, path, _clean, _point), log in zip(todo, opened, strict=True):
            self._register(tp, log)
            if log.recovered:
                recovered += 1
                logger.info("recovered log %s (%d segments re-validated, end offset %d)",
                            path.name, log.recovered, log.log_end_offset)  # fmt: skip
        shutdown = "clean" if all(clean_dirs.values()) else "not clean"
        logger.info(
            "loaded %d logs in %.2fs (%d recovered, %d clean%s)",
            len(self._logs), time.monotonic() - started, recovered, len(self._logs) - recovered,
            f"; last shutdown {shutdown}" if self._logs else "",  # no logs: no last shutdown
        )
        return doomed

    def _open(self, tp: TopicPartition, path: Path, config: LogConfig) -> Log:
        log = Log.open(path, config, self.clock, flusher=self.flusher,
                       producer_id_expiration_ms=self.producer_id_expiration_ms)  # fmt: skip
        self._register(tp, log)
        return log

    def _register(self, tp: TopicPartition, log: Log) -> None:
        """Serve ``log`` as ``tp`` and put it on the maintenance schedule (owner's thread)."""
        previous = self._logs.get(tp)
        if previous is not None:
            self._counts[previous.dir.parent] -= 1
        log.failures = self.failures
        log.speed = self.speed_of(log.dir.parent)
        if self.failures.is_offline(log.dir.parent):
            log.go_offline()
        self._logs[tp] = log
        self._counts[log.dir.parent] = self._counts.get(log.dir.parent, 0) + 1
        touch = self._schedule.touch
        log.on_change = lambda: touch(tp)
        touch(tp)
        # a C-level call per HW move (every append on a single node), no Python frame
        log.on_hw_change = functools.partial(self._hw_changed.__setitem__, tp, log)
        self._hw_changed[tp] = log
        self._classify(tp, log)

    def _classify(self, tp: TopicPartition, log: Log) -> None:
        """Keep :meth:`compacted_logs` in step with ``log``'s config (after every change)."""
        if log.config.compact:
            self._compacted[tp] = log
        else:
            self._compacted.pop(tp, None)

    def compacted_logs(self) -> list[tuple[TopicPartition, Log]]:
        """The registered logs with ``cleanup.policy`` including ``compact`` (all the log
        cleaner must plan: not every log)."""
        return list(self._compacted.items())

    def take_hw_changed(self) -> dict[TopicPartition, Log | None]:
        """The partitions whose high watermark may have changed since the last call (set
        by each log's ``on_hw_change``; also new and moved ones), each with its log (None:
        detached since), and forget them."""
        changed = dict(self._hw_changed)
        self._hw_changed.clear()  # in place: every log's hook holds this dict
        return changed

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
        wanted = list(partitions)
        try:
            for partition, parent in zip(wanted, self.next_dirs(len(wanted)), strict=True):
                for other in self.dirs:  # left by a crash: a partition being created is empty
                    stale = other / f"{topic}-{partition}"
                    if stale.exists():
                        remove_dirs([stale])
                made.append(Log.create(parent / f"{topic}-{partition}", config, self.clock,
                                       flusher=self.flusher,
                                       producer_id_expiration_ms=self.producer_id_expiration_ms))  # fmt: skip
            for parent in {log.dir.parent for log in made}:
                atomic_file.fsync_path(parent)
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

    def moved(self, topic: str, partition: int, old_parent: Path) -> None:
        """A registered log now lives in another log directory (it adopted a moved copy)."""
        log = self._logs[(topic, partition)]
        # the adopted copy was opened on its own: it reports to this broker's directories
        log.failures = self.failures
        log.speed = self.speed_of(log.dir.parent)
        self._hw_changed[(topic, partition)] = log  # its HW checkpoint entry changes file
        self._counts[old_parent] -= 1
        self._counts[log.dir.parent] = self._counts.get(log.dir.parent, 0) + 1

    def detach(self, topic: str, partition: int) -> Log | None:
        """Unregister a log (no more reads or appends); the caller removes it with
        :func:`remove_log`, off the event loop."""
        self._schedule.remove((topic, partition))
        log = self._logs.pop((topic, partition), None)
        self._compacted.pop((topic, partition), None)
        if log is not None:
            log.on_change = log.on_hw_change = None
            self._hw_changed[(topic, partition)] = None  # its checkpoint entry goes
            self._counts[log.dir.parent] -= 1
        return log

    def create(self, topic: str, partition: int, overrides: Mapping[str, str]) -> Log:
        """Open (creating) the log; validates ``overrides`` (InvalidConfigError)."""
        config = LogConfig.from_configs(overrides, self.broker_configs)
        self._overrides[topic] = dict(overrides)
        if (topic, partition) in self.offline_logs:
            raise KafkaStorageError(f"the log directory {self.offline_logs[topic, partition]} "
                                    f"of {topic}-{partition} is offline")  # fmt: skip
        existing = self._logs.get((topic, partition))
        if existing is not None:
            existing.update_config(config)
            self._classify((topic, partition), existing)
            return existing
        parent = self.next_dirs(1)[0]
        return self._open((topic, partition), parent / f"{topic}-{partition}", config)

    def delete(self, topic: str, partition: int) -> None:
        log = self.detach(topic, partition)
        if log is not None:
            remove_log(log)

    def update_topic_config(self, topic: str, overrides: Mapping[str, str]) -> None:
        """Apply new overrides to every partition of ``topic`` (validated first)."""
        config = LogConfig.from_configs(overrides, self.broker_configs)
        self._overrides[topic] = dict(overrides)
        for tp, log in self._logs.items():
            if tp[0] == topic:
                log.update_config(config)  # which touches its maintenance schedule
                self._classify(tp, log)

    def update_broker_configs(self, broker_configs: Mapping[str, str]) -> None:
        """New broker properties (a dynamic broker config changed): every log gets its config
        again from its topic's overrides and these defaults. Validated before anything
        changes (InvalidConfigError)."""
        configs = dict(broker_configs)
        new = {topic: LogConfig.from_configs(o, configs) for topic, o in self._overrides.items()}
        self.broker_configs = configs
        for tp, log in self._logs.items():
            config = new.get(tp[0])
            log.update_config(config if config is not None else self._config(tp[0]))
            self._classify(tp, log)

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
        self._notice_wall_step(now)
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
            except (OSError, DiskError) as exc:
                logger.warning("maintenance failed for %s-%d: %s", *tp, exc)
                with contextlib.suppress(StorageError):
                    log.disk_error(exc, undone=False)  # a half-done roll or deletion
            self._schedule.schedule(tp, log.next_maintenance())
        return visited

    def _notice_wall_step(self, mono: float) -> None:
        """Re-plan every log's time-based maintenance when the wall clock was stepped (NTP,
        an operator) since the last tick. Deadlines are kept in monotonic time, converted from
        the wall-clock ones (``segment.ms``, ``retention.ms``) when planned, so a step would
        otherwise shift them by its size: a clock set back a day and corrected again kept
        expired segments a day longer than ``retention.ms``, where Kafka checks every log
        against the wall clock at each ``log.retention.check.interval.ms``."""
        offset = self.clock.time_ms() - mono * 1000
        last, self._wall_offset = self._wall_offset, offset
        if last is not None and abs(offset - last) > WALL_STEP_MS:
            logger.warning("the wall clock stepped by %+d ms: re-planning the maintenance of "
                           "%d logs", offset - last, len(self._logs))  # fmt: skip
            for tp in self._logs:
                self._schedule.touch(tp)

    def maintenance_backlog(self) -> bool:
        """Whether work is left that a ``limit``-ed :meth:`maintenance` call did not do."""
        return self._schedule.backlog() or bool(self._expiry_sweep)

    def recovery_points(self) -> dict[TopicPartition, int]:
        """Every log's recovery point now (build on the owner's thread, write anywhere with
        :func:`strom.storage.log_dir.write_offsets`)."""
        return {tp: log.recovery_point for tp, log in self._logs.items()}

    def by_dir(self, values: Mapping[TopicPartition, int]) -> dict[Path, dict[TopicPartition, int]]:
        """``values`` split by the log directory of each registered partition (every
        directory present, possibly empty: its checkpoint is rewritten without stale
        entries); partitions not registered go to the first directory."""
        out: dict[Path, dict[TopicPartition, int]] = {d: {} for d in self.dirs}
        if len(self.dirs) == 1:
            out[self.data_dir] = dict(values)
            return out
        for tp, value in values.items():
            log = self._logs.get(tp)
            out[log.dir.parent if log is not None else self.data_dir][tp] = value
        return out

    def write_checkpoints(self, name: str, split: Mapping[Path, Mapping[TopicPartition, int]]
                          ) -> None:  # fmt: skip
        """Write the multi-partition checkpoint ``name`` of each online log directory from
        ``split`` (:meth:`by_dir`). Any thread. A directory whose write fails keeps its
        previous file (:func:`strom.storage.atomic_file.replace`) and the error is reported
        (:mod:`strom.storage.log_dir_failures`); the other directories are still written,
        and the first error is raised after them. Offline directories are left alone: their
        files stay as the restart's recovery will find them."""
        failed: OSError | None = None
        for parent, values in split.items():
            if self.failures.is_offline(parent):
                continue
            try:
                log_dir.write_offsets(parent / name, values)
            except OSError as exc:
                self.failures.report(parent, exc, undone=True)
                failed = failed or exc
        if failed is not None:
            raise failed

    def checkpoint_recovery_points(self, points: Mapping[TopicPartition, int]) -> None:
        """Write each log directory's recovery-point checkpoint (thread-safe when ``points``
        was split on the owner's thread: see :meth:`checkpoint_recovery_points_async`)."""
        self.write_checkpoints(log_dir.RECOVERY_POINT_FILE, self.by_dir(points))

    def checkpoint_recovery_points_async(self) -> Future[None]:
        """Have the flusher write each directory's recovery-point checkpoint with every
        log's recovery point now (each moved by the flusher only after its fsync; the file is
        written after the jobs queued before, and never at the same time as shutdown's)."""
        split = self.by_dir(self.recovery_points())
        return self.flusher.submit(lambda: self.write_checkpoints(log_dir.RECOVERY_POINT_FILE,
                                                                  split))  # fmt: skip

    # --- offline log directories -----------------------------------------------------------

    def _stop_dir_logs(self, dir: Path) -> None:
        """(Any thread: a failure listener) ``dir`` went offline: its logs refuse appends and
        skip their flusher work at once; :meth:`take_offline` then detaches them."""
        for log in list(self._logs.values()):
            if log.dir.parent == dir:
                log.go_offline()

    def take_offline(self, dir: Path) -> list[TopicPartition]:
        """(Owner's thread) detach every log of the offline directory ``dir``: no more
        reads, appends, maintenance or checkpoint entries; each partition is remembered in
        :attr:`offline_logs` (a replica there answers KAFKA_STORAGE_ERROR and no new log is
        made for it elsewhere until the broker restarts). Returns the partitions."""
        gone: list[TopicPartition] = []
        for tp, log in list(self._logs.items()):
            if log.dir.parent != dir:
                continue
            log.go_offline()
            self._schedule.remove(tp)
            del self._logs[tp]
            self._compacted.pop(tp, None)
            self._hw_changed.pop(tp, None)
            log.on_change = log.on_hw_change = None
            self._counts[dir] -= 1
            self.offline_logs[tp] = dir
            gone.append(tp)
        return gone

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
        failed: set[Path] = set()
        for tp, log in self.logs():
            if log.offline:
                continue  # its directory is offline: left as it is for the restart's recovery
            try:
                log.close(sync=False)
                points[tp] = log.recovery_point
            except (OSError, StorageError) as exc:
                failed.add(log.dir.parent)
                logger.error("closing the log in %s failed: %s", log.dir, exc)
        self.flusher.drain()  # jobs a close queued (none expected) before the one sync
        if points or failed:
            split = self.by_dir(points)
            for parent in self.dirs:  # one syncfs per file system would do; dirs are few
                if self.failures.is_offline(parent):
                    logger.warning("log directory %s is offline: no clean shutdown for it",
                                   parent)  # fmt: skip
                    continue
                try:
                    log_dir.sync_filesystem(parent)
                    log_dir.write_offsets(parent / log_dir.RECOVERY_POINT_FILE, split[parent])
                    if parent not in failed:
                        log_dir.write_clean_marker(parent)
                except OSError as exc:  # a full or failing disk: the next start recovers
                    logger.error("closing log directory %s failed: %s", parent, exc)
            logger.info("closed %d logs in %.2fs", len(points), time.monotonic() - started)
        self._logs.clear()
        self.flusher.close()
        self.writers.close()
        self._unlock()
