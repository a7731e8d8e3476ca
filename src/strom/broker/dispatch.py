"""API key → handler, and the ApiVersions table derived from it.

A handler is ``async def handle(ctx: RequestContext, request) -> response | None`` registered
with :func:`handler` for the versions it serves; ``None`` means "send no response" (Produce
with acks=0). A handler may also be a plain function that returns the response, or a coroutine
when it has to wait (Produce: the connection answers it without a task switch when it need not
wait). Each module in :mod:`strom.broker.handlers` registers its own handlers when
imported, and :func:`load_handlers` imports them all, so adding an API is adding one module.

The advertised range is what the broker answers: ``advertise_min`` may be lower than the
decodable minimum where clients gate features on it (Produce is advertised from v0 because
librdkafka turns compression off without it; v0–2 requests are still refused), and
``advertise_max`` lower than the served maximum for versions only brokers send each other
(AddPartitionsToTxn v4, KIP-890's verification: clients must not pick it).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import strom.broker.handlers as handlers_package  # the package alone: its modules import this one

if TYPE_CHECKING:
    from strom.broker.context import RequestContext

#: (context, request) -> response, None, or a coroutine giving one of those
HandlerFn = Callable[["RequestContext", Any], Any]
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True, slots=True)
class HandlerSpec:
    api_key: int
    min_version: int
    max_version: int
    advertise_min: int
    fn: HandlerFn
    advertise_max: int = -1  # -1: max_version

    @property
    def advertised_max(self) -> int:
        return self.max_version if self.advertise_max < 0 else self.advertise_max

    def serves(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


_REGISTRY: dict[int, HandlerSpec] = {}


def handler(
    api_key: int, min_version: int, max_version: int, *, advertise_min: int | None = None,
    advertise_max: int | None = None,
) -> Callable[[F], F]:
    """Register the decorated function for ``api_key`` versions min..max inclusive."""

    def register(fn: F) -> F:
        if api_key in _REGISTRY:
            raise RuntimeError(f"api key {api_key} has two handlers")
        _REGISTRY[api_key] = HandlerSpec(
            api_key,
            min_version,
            max_version,
            min_version if advertise_min is None else advertise_min,
            fn,
            -1 if advertise_max is None else advertise_max,
        )
        return fn

    return register


def load_handlers() -> dict[int, HandlerSpec]:
    """Import every handler module (idempotent) and return the registry."""
    for info in pkgutil.iter_modules(handlers_package.__path__):
        importlib.import_module(f"{handlers_package.__name__}.{info.name}")
    return _REGISTRY


def lookup(api_key: int) -> HandlerSpec | None:
    return _REGISTRY.get(api_key)


def supported_apis() -> list[HandlerSpec]:
    return sorted(_REGISTRY.values(), key=lambda s: s.api_key)
