"""What a handler gets besides the request: who asked, and the broker to act on."""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

from strom.protocol.messages import RequestHeader, build, response_class, response_module

if TYPE_CHECKING:
    from strom.broker.broker import Broker


@dataclass(slots=True)
class RequestContext:
    header: RequestHeader
    broker: Broker
    client_host: str
    client_port: int
    connection_id: int
    remote_time: float = 0.0  # seconds parked in the purgatory (request metrics' RemoteTime)

    @property
    def api_version(self) -> int:
        return self.header.api_version

    @property
    def client_id(self) -> str:
        return self.header.client_id or ""

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
