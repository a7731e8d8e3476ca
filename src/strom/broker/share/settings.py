"""A share group's settings: its group configs (config resource GROUP) over the broker's.

Kafka's names: the group config ``share.<x>`` overrides the broker config
``group.share.<x>`` (``share.record.lock.duration.ms`` over
``group.share.record.lock.duration.ms``, …); ``share.auto.offset.reset`` (``latest``,
``earliest`` or ``by_duration:<ISO-8601 duration>``) and ``share.isolation.level``
(``read_uncommitted`` / ``read_committed``) exist only as group configs. Group configs live in
the metadata store (:mod:`strom.broker.group_configs`); a cache re-reads a group's at most every
``TTL_S`` seconds (an IncrementalAlterConfigs on another broker takes effect here within that),
the first read of a group is awaited.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from strom.broker import group_configs

if TYPE_CHECKING:
    from strom.config import BrokerConfig
    from strom.metadata.store import MetadataStore

log = logging.getLogger(__name__)
TTL_S = 1.0


@dataclass(frozen=True, slots=True)
class ShareSettings:
    lock_ms: int = 30_000
    delivery_limit: int = 5
    max_locks: int = 2000
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    #: "latest", "earliest", or "by_duration:<ISO duration>"
    auto_offset_reset: str = "latest"
    read_committed: bool = False
    renew_enabled: bool = True


def resolve(own: Mapping[str, str], broker: BrokerConfig) -> ShareSettings:
    def pick(name: str) -> int:
        value = own.get(f"share.{name}")
        if value is None:
            return broker.get_int(f"group.share.{name}")
        return int(value)

    return ShareSettings(
        lock_ms=pick("record.lock.duration.ms"),
        delivery_limit=pick("delivery.count.limit"),
        max_locks=pick("partition.max.record.locks"),
        session_timeout_ms=pick("session.timeout.ms"),
        heartbeat_interval_ms=pick("heartbeat.interval.ms"),
        auto_offset_reset=(own.get("share.auto.offset.reset") or "latest").strip().lower(),
        read_committed=(own.get("share.isolation.level") or "").strip().lower() == "read_committed",
        renew_enabled=(own.get("share.renew.acknowledge.enable") or "true").lower() == "true",
    )  # fmt: skip


class SettingsCache:
    def __init__(self, store: MetadataStore, broker: BrokerConfig, ttl_s: float = TTL_S) -> None:
        self.store = store
        self.broker = broker
        self.ttl_s = ttl_s
        self._cached: dict[str, tuple[float, ShareSettings]] = {}
        self._refreshing: dict[str, asyncio.Task[ShareSettings]] = {}

    async def get(self, group: str) -> ShareSettings:
        now = asyncio.get_running_loop().time()
        cached = self._cached.get(group)
        if cached is not None:
            if now - cached[0] >= self.ttl_s and group not in self._refreshing:
                self._start(group)
            return cached[1]
        task = self._refreshing.get(group) or self._start(group)
        return await asyncio.shield(task)

    def peek(self, group: str) -> ShareSettings:
        """The cached settings (the broker's when none were read yet), without waiting."""
        cached = self._cached.get(group)
        return cached[1] if cached is not None else resolve({}, self.broker)

    def _start(self, group: str) -> asyncio.Task[ShareSettings]:
        task = asyncio.get_running_loop().create_task(self._read(group))
        self._refreshing[group] = task
        task.add_done_callback(lambda _t: self._refreshing.pop(group, None))
        return task

    async def _read(self, group: str) -> ShareSettings:
        try:
            own = await group_configs.read(self.store, group)
            settings = resolve(own, self.broker)
        except Exception as exc:  # a store hiccup: keep what we had
            log.warning("share group %s: reading its configs failed: %s", group, exc)
            settings = self.peek(group)
        self._cached[group] = (asyncio.get_running_loop().time(), settings)
        return settings

    def invalidate(self, group: str) -> None:
        self._cached.pop(group, None)
