"""What a handler gets besides the request: who asked, and the broker's services.

Kafka's ``RequestContext`` in small: the request header, the connection it came on, the
principal it acts as, and the frozen set of services (:class:`~strom.broker.services.BrokerServices`)
a handler may use — never the broker itself. Each service is also a read-only property here
(``ctx.replicas``, ``ctx.topics`` …), which is how handlers use them.

A context is immutable (a tuple: one is made per request, on the produce path too); what
belongs to the connection (the peer, the principal, the purgatory time of the request being
handled) is its :class:`Client`, one per connection.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any, NamedTuple

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
    from strom.security.sasl.authenticator import Authenticator
    from strom.storage.log_manager import LogManager

#: Kafka's principal of an unauthenticated (PLAINTEXT) connection
ANONYMOUS = "User:ANONYMOUS"


class Client:
    """The connection a request came on: the peer's address, the connection's id, the
    principal it acts as, the listener it came in on (its name, ``""`` for the broker's own
    local calls, and its security protocol: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL,
    :mod:`strom.security.listeners`), and the time the request being handled spent parked in
    the purgatory (``remote_s``, the request metrics' RemoteTime; a connection handles its
    requests one at a time, so it is zero between them). On a SASL listener ``sasl`` is the
    connection's authenticator (SaslHandshake / SaslAuthenticate use it), else None."""

    __slots__ = ("host", "port", "connection_id", "principal", "remote_s", "listener",
                 "security_protocol", "sasl")

    def __init__(self, host: str, port: int, connection_id: int,
                 principal: str = ANONYMOUS, listener: str = "",
                 security_protocol: str = "PLAINTEXT") -> None:  # fmt: skip
        self.host = host
        self.port = port
        self.connection_id = connection_id
        self.principal = principal
        self.remote_s = 0.0
        self.listener = listener
        self.security_protocol = security_protocol
        self.sasl: Authenticator | None = None


class RequestContext(NamedTuple):
    header: RequestHeader
    services: BrokerServices
    client: Client

    @property
    def client_host(self) -> str:
        return self.client.host

    @property
    def client_port(self) -> int:
        return self.client.port

    @property
    def connection_id(self) -> int:
        return self.client.connection_id

    @property
    def principal(self) -> str:
        return self.client.principal

    @property
    def remote_time(self) -> float:
        return self.client.remote_s

    @remote_time.setter
    def remote_time(self, seconds: float) -> None:
        self.client.remote_s = seconds

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
