"""The controller's channels to the brokers: one connection and one queue per live broker.

Kafka's ``ControllerChannelManager``. Requests to one broker are sent in the order they were
queued, one at a time (a LeaderAndIsr must not overtake the UpdateMetadata queued before it);
each is retried, with a backoff, until the broker answers or the controller removes the broker
(it left the cluster) or stops (resignation). The answer goes to the request's callback, on the
event loop.

The controller reaches the network only through :class:`ControllerNetwork`, which the broker
provides (:class:`strom.broker.controller_channel.BrokerNetwork`: connections to the other
brokers, bound to this broker's listener address so per-broker firewall rules in
network-partition tests tell brokers apart; tests pass fakes). The controller's own broker is
not reached through a socket: its requests go to ``local_call``, a direct call of the broker's
handler, in the same queue order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from strom.metadata.zk_model import BrokerRegistration

log = logging.getLogger(__name__)

LocalCall = Callable[[int, int, Any], Awaitable[Any]]


class Connection(Protocol):
    """One connection to a broker. ``send`` raises an ``OSError`` (``ConnectionError``) when
    the broker cannot be reached or does not answer: the channel retries."""

    async def send(self, api_key: int, api_version: int, request: Any, timeout: float) -> Any: ...

    def close(self, error: Exception | None = None) -> None: ...


class ControllerNetwork(Protocol):
    """How the controller reaches the brokers (module doc)."""

    def connect(self, broker_id: int, registration: BrokerRegistration) -> Connection:
        """A connection to another broker (opened by its first request)."""
        ...

    async def local_call(self, api_key: int, api_version: int, request: Any) -> Any:
        """Deliver a request to this broker's own handler."""
        ...
Callback = Callable[[Any], None]
_BACKOFF_MIN = 0.05
_BACKOFF_MAX = 1.0


@dataclass(slots=True)
class _Item:
    api_key: int
    api_version: int
    request: Any
    callback: Callback | None


class _BrokerChannel:
    def __init__(self, owner: ChannelManager, broker_id: int, reg: BrokerRegistration) -> None:
        self.owner = owner
        self.broker_id = broker_id
        self.queue: asyncio.Queue[_Item | None] = asyncio.Queue()
        self.closed = False
        self.connection: Connection | None = None
        self.inflight = False
        if broker_id != owner.own_id:
            self.connection = owner.network.connect(broker_id, reg)
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def _send(self, item: _Item) -> Any:
        if self.connection is None:
            return await self.owner.network.local_call(item.api_key, item.api_version,
                                                       item.request)  # fmt: skip
        return await self.connection.send(item.api_key, item.api_version, item.request,
                                          self.owner.request_timeout)  # fmt: skip

    async def _run(self) -> None:
        while not self.closed:
            item = await self.queue.get()
            if item is None:  # closed
                return
            self.inflight = True
            backoff = _BACKOFF_MIN
            while not self.closed:
                try:
                    response = await self._send(item)
                except OSError as exc:  # unreachable, no answer: retried
                    log.debug("controller request %d to broker %d failed (%s), retrying",
                              item.api_key, self.broker_id, exc)  # fmt: skip
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, _BACKOFF_MAX)
                    continue
                except Exception:
                    log.exception("controller request %d to broker %d failed",
                                  item.api_key, self.broker_id)  # fmt: skip
                    break
                if item.callback is not None and not self.closed:
                    try:
                        item.callback(response)
                    except Exception:
                        log.exception("callback of request %d from broker %d failed",
                                      item.api_key, self.broker_id)  # fmt: skip
                break
            self.inflight = False

    async def close(self) -> None:
        # A flag and a sentinel as well as the cancellation: a cancellation can be swallowed
        # (Python 3.11's wait_for returning a result that raced with it), and a channel must
        # stop sending whatever it was doing. Never wait for it for long.
        self.closed = True
        self.queue.put_nowait(None)
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.wait({self.task}, timeout=1.0)
        if self.connection is not None:
            self.connection.close()


class ChannelManager:
    def __init__(self, own_id: int, network: ControllerNetwork, *,
                 request_timeout: float = 30.0) -> None:  # fmt: skip
        self.own_id = own_id
        self.network = network
        self.request_timeout = request_timeout
        self._channels: dict[int, _BrokerChannel] = {}

    def add_broker(self, broker_id: int, reg: BrokerRegistration) -> None:
        if broker_id not in self._channels:
            self._channels[broker_id] = _BrokerChannel(self, broker_id, reg)

    async def remove_broker(self, broker_id: int) -> None:
        channel = self._channels.pop(broker_id, None)
        if channel is not None:
            await channel.close()

    def brokers(self) -> set[int]:
        return set(self._channels)

    def send(self, broker_id: int, api_key: int, api_version: int, request: Any,
             callback: Callback | None = None) -> None:  # fmt: skip
        channel = self._channels.get(broker_id)
        if channel is None:
            log.debug("no channel to broker %d: request %d dropped", broker_id, api_key)
            return
        channel.queue.put_nowait(_Item(api_key, api_version, request, callback))

    def idle(self) -> bool:
        """Nothing queued (tests and controlled shutdown wait for it)."""
        return all(c.queue.empty() and not c.inflight for c in self._channels.values())

    async def close(self) -> None:
        channels, self._channels = list(self._channels.values()), {}
        for channel in channels:
            await channel.close()
