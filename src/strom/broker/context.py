"""What a handler gets besides the request: who asked, and the broker's services.

Kafka's ``RequestContext`` in small: the request header, the connection it came on, the
principal it acts as, and the frozen set of services (:class:`~strom.broker.services.BrokerServices`)
a handler may use — never the broker itself. Each service is also a read-only property here
(``ctx.replicas``, ``ctx.topics`` …), which is how handlers use them.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

from strom.protocol.messages import RequestHeader, build, response_class, response_module

if TYPE_CHECKING:
    from strom.broker.controller_channel import ControllerChannel
    from strom.broker.dynamic_config import DynamicConfig
    from strom.broker.group.service import GroupService
    from strom.broker.node import NodeIdentity
    from strom.broker.observability.metrics import BrokerMetrics
    from strom.broker.services import BrokerServices
    from strom.broker.share.service import ShareService
    from strom.broker.topics import Topics
    from strom.broker.txn.service import TxnService
    from strom.clock import Clock
    from strom.config import BrokerConfig
    from strom.replication.replica_manager import ReplicaManager
    from strom.storage.log_manager import LogManager

#: Kafka's principal of an unauthenticated (PLAINTEXT) connection
ANONYMOUS = "User:ANONYMOUS"


@dataclass(slots=True)
class RequestContext:
    header: RequestHeader
    services: BrokerServices
    client_host: str
    client_port: int
    connection_id: int
    principal: str = ANONYMOUS
    remote_time: float = 0.0  # seconds parked in the purgatory (request metrics' RemoteTime)

    @property
    def api_version(self) -> int:
        return self.header.api_version

    @property
    def client_id(self) -> str:
        return self.header.client_id or ""

    # the services a handler uses (see strom.broker.services) ---------------------------------
    @property
    def node(self) -> NodeIdentity:
        return self.services.node

    @property
    def config(self) -> BrokerConfig:
        return self.services.config

    @property
    def configs(self) -> DynamicConfig:
        return self.services.configs

    @property
    def clock(self) -> Clock:
        return self.services.clock

    @property
    def metrics(self) -> BrokerMetrics:
        return self.services.metrics

    @property
    def replicas(self) -> ReplicaManager:
        return self.services.replicas

    @property
    def logs(self) -> LogManager:
        return self.services.logs

    @property
    def topics(self) -> Topics:
        return self.services.topics

    @property
    def groups(self) -> GroupService:
        return self.services.groups

    @property
    def transactions(self) -> TxnService:
        return self.services.transactions

    @property
    def controller(self) -> ControllerChannel:
        return self.services.controller

    @property
    def shares(self) -> ShareService:
        return self.services.shares

    # building the response ---------------------------------------------------------------------
    @property
    def module(self) -> ModuleType:
        """The ``kio`` module of this request's response version (for nested classes)."""
        return response_module(self.header.api_key, self.header.api_version)

    def make(self, class_name: str, **values: Any) -> Any:
        """Build a nested response class of this version by name, see :func:`build`."""
        return build(getattr(self.module, class_name), **values)

    def respond(self, **values: Any) -> Any:
        """Build this request's top-level response entity."""
        return build(response_class(self.header.api_key, self.header.api_version), **values)
