"""Creating, growing and deleting topics without stalling the event loop.

Every path that makes partitions (CreateTopics, CreatePartitions, auto-creation in Metadata /
FindCoordinator / the group coordinator, start-up repair) comes here. The file work runs on one
worker thread (so creations and deletions keep their order), the registration on the loop:

create / grow
    1. refuse a topic already being created, grown or deleted (``_busy``);
    2. thread: :meth:`LogManager.create_logs` makes every directory and empty segment and
       fsyncs the data directory, or removes all it made and raises;
    3. loop: the topic registry is written (the metadata store; durable before the response,
       see :mod:`strom.metadata.embedded`), then the logs are registered, in one step of the
       loop, so no request sees the topic without its logs.

    Thousands of partitions at once pause the cyclic garbage collector meanwhile and freeze
    the new partitions' objects after (:mod:`strom.long_lived`).

    A failure in step 2 registers nothing and answers KAFKA_STORAGE_ERROR with the reason (e.g.
    ``[Errno 24] Too many open files``). A crash between 2 and 3 leaves directories of no
    registered partition: the next start removes them (:meth:`LogManager.load`).

delete
    1. loop: the logs are detached (no more reads or appends), fetchers woken;
    2. thread: files closed, directories renamed ``…-delete``;
    3. loop: the registry entry is removed;
    4. a second thread removes the directories (``rmtree``) in the background.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, TypeVar

from strom import long_lived
from strom.metadata.topics import TopicInfo
from strom.protocol.errors import ErrorCode, KafkaError
from strom.storage.log_manager import doomed_name, remove_dirs, remove_log

if TYPE_CHECKING:
    from pathlib import Path

    from strom.metadata.topics import TopicRegistry
    from strom.replication.service import ReplicationService
    from strom.storage.log import Log
    from strom.storage.log_manager import LogManager

log = logging.getLogger(__name__)
T = TypeVar("T")


class TopicLifecycle:
    def __init__(self, registry: TopicRegistry, logs: LogManager, replication: ReplicationService,
                 node_id: int) -> None:  # fmt: skip
        self.registry = registry
        self.logs = logs
        self.replication = replication
        self.node_id = node_id
        self._files = ThreadPoolExecutor(1, thread_name_prefix="strom-topic-files")
        self._removals = ThreadPoolExecutor(1, thread_name_prefix="strom-rmtree")
        self._busy: set[str] = set()
        self._background: set[asyncio.Future[None]] = set()

    def busy(self, name: str) -> bool:
        """True while ``name`` is being created, grown or deleted."""
        return name in self._busy

    async def _run(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._files, fn)

    def _claim(self, name: str) -> None:
        if name in self._busy:
            raise KafkaError(
                ErrorCode.reassignment_in_progress
                if name in self.registry
                else ErrorCode.topic_already_exists,
                f"Topic '{name}' is being created, altered or deleted; try again.",
            )
        self._busy.add(name)

    async def _make_logs(self, name: str, partitions: list[int],
                         configs: Mapping[str, str]) -> list[Log]:  # fmt: skip
        logs = self.logs
        try:
            return await self._run(lambda: logs.create_logs(name, partitions, configs))
        except OSError as exc:
            log.error("could not create %d partitions of topic %s: %s", len(partitions), name, exc)
            raise KafkaError(
                ErrorCode.kafka_storage_error,
                f"Could not create the logs of topic '{name}' (nothing was created): {exc}",
            ) from None

    async def _discard(self, made: list[Log]) -> None:
        def remove() -> None:
            for x in made:
                remove_log(x)

        await self._run(remove)

    async def create(self, name: str, partitions: int, configs: Mapping[str, str]) -> TopicInfo:
        """Create ``name`` with ``partitions`` partitions on this node (all or nothing)."""
        if name in self.registry:
            raise KafkaError(ErrorCode.topic_already_exists, f"Topic '{name}' already exists.")
        self._claim(name)
        try:
            with long_lived.bulk(partitions):
                made = await self._make_logs(name, list(range(partitions)), configs)
                try:
                    replicas = {p: [self.node_id] for p in range(partitions)}
                    info = await self.registry.create(name, replicas, configs)
                except BaseException:
                    await self._discard(made)
                    raise
                self.logs.add(name, made, info.configs)
                self.replication.partitions_created(info, range(partitions))
                long_lived.added(partitions)
        finally:
            self._busy.discard(name)
        log.info("created topic %s with %d partitions", name, partitions)
        return info

    async def add_partitions(self, name: str, new: Mapping[int, list[int]]) -> TopicInfo:
        """Add the partitions ``new`` (partition -> replicas) to ``name`` (all or nothing)."""
        self._claim(name)
        try:
            info = self.registry.get(name)
            if info is None:
                raise KafkaError(ErrorCode.unknown_topic_or_partition,
                                 f"Topic '{name}' does not exist.")  # fmt: skip
            local = [p for p, replicas in new.items() if self.node_id in replicas]
            with long_lived.bulk(len(local)):
                made = await self._make_logs(name, local, info.configs)
                try:
                    info = await self.registry.add_partitions(name, new)
                except BaseException:
                    await self._discard(made)
                    raise
                self.logs.add(name, made, info.configs)
                self.replication.partitions_created(info, local)
                long_lived.added(len(local))
        finally:
            self._busy.discard(name)
        return info

    async def delete(self, info: TopicInfo) -> None:
        """Delete the topic ``info``: logs first, then the registry entry (module doc)."""
        self._claim(info.name)
        try:
            detached: list[Log] = []
            for partition in info.replicas:
                found = self.logs.detach(info.name, partition)
                if found is not None:
                    detached.append(found)
                self.replication.replicas.purgatory.notify((info.name, partition))
            doomed = await self._run(lambda: [_close_and_rename(x) for x in detached])
            await self.registry.delete(info.name)
            self.replication.partitions_removed(info.name, info.replicas)
        finally:
            self._busy.discard(info.name)
        self.remove_in_background([d for d in doomed if d is not None])

    def remove_in_background(self, paths: list[Path]) -> None:
        """``rmtree`` ``paths`` on the removal thread; errors are logged, never raised."""
        if not paths:
            return
        fut = asyncio.get_running_loop().run_in_executor(self._removals, remove_dirs, paths)
        self._background.add(fut)
        fut.add_done_callback(self._removed)

    def _removed(self, fut: asyncio.Future[None]) -> None:
        self._background.discard(fut)
        if not fut.cancelled() and fut.exception() is not None:
            log.error("removing log directories failed: %s", fut.exception())

    async def close(self) -> None:
        """Wait for the work in flight (bounded: removals left over finish at the next start)."""
        if self._background:
            await asyncio.wait(self._background, timeout=10)
        self._files.shutdown(wait=True)
        self._removals.shutdown(wait=False, cancel_futures=True)


def _close_and_rename(log_: Log) -> Path | None:
    log_.close_files()
    target = doomed_name(log_.dir)
    try:
        log_.dir.rename(target)
    except OSError as exc:
        log.error("could not rename %s for deletion: %s", log_.dir, exc)
        return None
    return target
