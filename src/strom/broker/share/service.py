"""Share groups as one broker service (``ctx.shares``): the parts wired together.

- :attr:`ShareService.state`: the share coordinator over ``__share_group_state``
  (:mod:`~strom.broker.share.state_service`), serving the state APIs 83–87;
- :attr:`ShareService.persister`: the way to that coordinator from anywhere in the cluster;
- :attr:`ShareService.manager`: this broker's share-partitions and share sessions (ShareFetch,
  ShareAcknowledge);
- :attr:`ShareService.groups`: share-group membership, beside the group coordinator: its records
  are replayed with ``__consumer_offsets`` (record types 9–15 are handed to it by the group
  service, :attr:`~strom.broker.group.service.GroupService.record_types`) and its groups are
  forgotten with their partition;
- :attr:`ShareService.settings`: each group's share settings (group configs over the broker's).

Built by the assembly after the group service (it registers its record types there before the
group coordinator loads anything) and started after it. Periodic work: lock expiry (every
:data:`~strom.broker.share.manager.EXPIRY_TICK_S`) and the closing of share sessions unused for
``group.share.session.timeout.ms`` (a client gone without closing its connection).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from strom.broker.group.service import AsyncioTimers
from strom.broker.share import group_records as grec
from strom.broker.share.groups import HeartbeatResult, MemberSettings, ShareGroups
from strom.broker.share.manager import EXPIRY_TICK_S, ShareManager
from strom.broker.share.persister import Persister
from strom.broker.share.settings import SettingsCache
from strom.broker.share.state_service import ShareStateService
from strom.protocol.errors import ErrorCode
from strom.protocol.messages import build, request_class, request_module
from strom.replication.peers import PeerConnections

if TYPE_CHECKING:
    from strom.broker.dynamic_config import DynamicConfig
    from strom.broker.group.service import GroupService
    from strom.broker.internal_topics import InternalTopics
    from strom.broker.topics import Topics
    from strom.clock import Clock
    from strom.config import BrokerConfig
    from strom.metadata.topics import TopicRegistry
    from strom.periodic import Periodic
    from strom.replication.replica_manager import ReplicaManager

log = logging.getLogger(__name__)
E = ErrorCode
SESSION_SWEEP_S = 5.0
LIST_OFFSETS, LIST_OFFSETS_VERSION = 2, 9


class ShareService:
    def __init__(self, config: BrokerConfig, clock: Clock, replicas: ReplicaManager,
                 registry: TopicRegistry, topics: Topics, internal_topics: InternalTopics,
                 groups: GroupService, configs: DynamicConfig, periodic: Periodic,
                 node_id: int, source_host: str | None) -> None:  # fmt: skip
        self.config = config
        self.clock = clock
        self.replicas = replicas
        self.topics = topics
        self.group_service = groups
        self.periodic = periodic
        self.state = ShareStateService(config, clock, replicas, registry, periodic)
        self.peers = PeerConnections(replicas.cache, "share", source_host)
        self.persister = Persister(self.state, replicas, internal_topics, self.peers, node_id)
        self.settings = SettingsCache(configs.store, config)
        self.manager = ShareManager(replicas, topics, self.persister, clock,
                                    config.get_int("group.share.max.share.sessions"))  # fmt: skip
        self.groups = ShareGroups(clock, AsyncioTimers(), self._append, self.not_here)
        self.groups.other_type = self._classic_group
        for kind in grec.SHARE_RECORD_TYPES:
            groups.record_types[kind] = self.groups.replay
        groups.partition_listeners.append(self)
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        await self.state.start()
        self.periodic.every(EXPIRY_TICK_S, self.manager.expire_due)
        self.periodic.every(SESSION_SWEEP_S, self._close_idle_sessions)

    async def stop(self) -> None:
        await self.state.stop()
        await self.manager.close()
        for task in list(self._tasks):
            task.cancel()
        self.peers.close()

    # --- the group coordinator's side ----------------------------------------------------------
    def not_here(self, group_id: str) -> ErrorCode | None:
        """NOT_COORDINATOR (…) unless this broker coordinates ``group_id``'s group now."""
        coord = self.group_service.coordinator
        if coord is None:
            return E.coordinator_not_available
        return coord.not_here(group_id)

    def _classic_group(self, group_id: str) -> bool:
        coord = self.group_service.coordinator
        return coord is not None and coord.get_group(group_id) is not None

    def _append(self, group_id: str, records: list[tuple[bytes, bytes | None]]) -> None:
        try:
            self.group_service.append_records(group_id, records, lambda _code: None)
        except Exception as exc:  # not the leader any more, below min ISR: logged, not fatal
            log.warning("share group %s: appending its records failed: %s", group_id, exc)

    def on_unloaded(self, partition: int) -> None:
        coord = self.group_service.coordinator
        if coord is None:
            return
        dropped = self.groups.unload(lambda gid: coord.partition_for(gid) == partition)
        if dropped:
            log.info("share groups: unloaded %d groups of partition %d", dropped, partition)

    def topic_lookup(self, name: str) -> tuple[uuid.UUID, int] | None:
        info = self.topics.get(name)
        if info is None or info.is_internal:
            return None
        return info.topic_id, info.partition_count

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        info = self.topics.by_id(topic_id)
        return info.name if info is not None else None

    async def heartbeat(self, group_id: str, member_id: str, member_epoch: int,
                        rack_id: str | None, subscribed: Sequence[str] | None, client_id: str,
                        client_host: str) -> HeartbeatResult:  # fmt: skip
        s = await self.settings.get(group_id) if group_id else self.settings.peek(group_id)
        settings = MemberSettings(s.session_timeout_ms, s.heartbeat_interval_ms,
                                  self.config.get_int("group.share.max.size"))  # fmt: skip
        result = self.groups.heartbeat(group_id, member_id, member_epoch, rack_id, subscribed,
                                       client_id, client_host, self.topic_lookup, settings)  # fmt: skip
        if result.error == E.none and member_epoch != -1:
            todo = self.groups.uninitialized(group_id)
            if todo:
                self._spawn(self._initialize(group_id, todo))
        return result

    async def _initialize(self, group_id: str, todo: dict[uuid.UUID, list[int]]) -> None:
        """Initialize the state of newly assigned share-partitions (start offset not chosen:
        their leader applies ``share.auto.offset.reset`` at first use)."""
        done: dict[uuid.UUID, list[int]] = {}
        failed: dict[uuid.UUID, list[int]] = {}
        for tid, parts in todo.items():
            for p in parts:
                code, message = await self.persister.initialize((group_id, tid, p), 0, -1)
                if code in (E.none, E.fenced_state_epoch):  # fenced: initialized at a newer epoch
                    done.setdefault(tid, []).append(p)
                else:
                    log.info("share group %s: initializing %s-%d failed: %s %s", group_id, tid,
                             p, code.name, message or "")  # fmt: skip
                    failed.setdefault(tid, []).append(p)
        self.groups.initialization_done(group_id, self.topic_name, done, failed)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def delete_state(self, group_id: str, topic_ids: Sequence[uuid.UUID] | None = None
                           ) -> dict[uuid.UUID, ErrorCode]:  # fmt: skip
        """Delete the share-partitions' state of ``group_id`` (of ``topic_ids``, or all), and
        forget them as initialized. The worst error per topic."""
        group = self.groups.get(group_id)
        if group is None:
            return {}
        wanted = list(topic_ids) if topic_ids is not None else list(group.initialized)
        results: dict[uuid.UUID, ErrorCode] = {}
        for tid in wanted:
            _name, parts = group.initialized.get(tid, ("", frozenset()))
            code = E.none
            for p in sorted(parts):
                c = await self.persister.delete((group_id, tid, p))
                if c != E.none:
                    code = c
            results[tid] = code
        self.groups.forget_initialized(group_id, [t for t, c in results.items() if c == E.none])
        self.manager.drop_group(group_id, wanted)
        return results

    async def high_watermark(self, topic: str, partition: int) -> int | None:
        """The partition's high watermark as its leader has it (a follower's lags behind): the
        local log's when this broker leads it, else a ListOffsets (latest) to the leader; None
        when it cannot be had now."""
        state = self.replicas.cache.partition(topic, partition)
        if state is None or state.leader < 0:
            return None
        if state.leader == self.replicas.node_id:
            log_ = self.replicas.logs.get(topic, partition)
            return log_.high_watermark if log_ is not None else None
        module = request_module(LIST_OFFSETS, LIST_OFFSETS_VERSION)
        request = build(request_class(LIST_OFFSETS, LIST_OFFSETS_VERSION), replica_id=-1,
                        isolation_level=0, topics=(build(module.ListOffsetsTopic, name=topic,
                            partitions=(build(module.ListOffsetsPartition, partition_index=partition,
                                              current_leader_epoch=-1, timestamp=-1),)),))  # fmt: skip
        try:
            resp = await self.peers.get(state.leader).send(LIST_OFFSETS, LIST_OFFSETS_VERSION,
                                                           request, 5.0)  # fmt: skip
            (answer,) = resp.topics[0].partitions
        except Exception as exc:  # the leader moved or is unreachable: no lag this time
            log.debug("high watermark of %s-%d from broker %d: %s", topic, partition,
                      state.leader, exc)  # fmt: skip
            return None
        return int(answer.offset) if int(answer.error_code) == 0 else None

    async def delete_group(self, group_id: str) -> ErrorCode:
        """DeleteGroups of a share group: refused while it has members; its share-partitions'
        state is deleted first (a failure there keeps the group, to be deleted again)."""
        if (code := self.not_here(group_id)) is not None:
            return code
        group = self.groups.get(group_id)
        if group is None:
            return E.group_id_not_found
        if group.members:
            return E.non_empty_group
        results = await self.delete_state(group_id)
        failed = [c for c in results.values() if c != E.none]
        if failed:
            return failed[0]
        return self.groups.delete(group_id)

    def ensure_group(self, group_id: str) -> None:
        """AlterShareGroupOffsets of a group that does not exist yet creates it (empty)."""
        self.groups.ensure(group_id)

    # --- the partition leaders' side ------------------------------------------------------------
    def connection_closed(self, connection_id: int) -> None:
        """A client connection closed: its share sessions close, their records are released."""
        self.manager.connection_closed(connection_id)

    def _close_idle_sessions(self) -> None:
        timeout = self.config.get_int("group.share.session.timeout.ms")
        for session in self.manager.sessions.idle(self.clock.time_ms() - timeout):
            log.info("share group %s: member %s's share session unused for %d ms: closed",
                     session.group, session.member, timeout)  # fmt: skip
            self.manager.release_session(session)
