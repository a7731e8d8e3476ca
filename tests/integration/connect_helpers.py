"""What the Connect integration tests share: a bounded wait and their module broker (their
``worker`` fixture is in ``tests/integration/conftest.py``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.topology import default_topology, module_broker

#: Every sink task is a new consumer group: without this each one would first wait Kafka's
#: default 3 s ``group.initial.rebalance.delay.ms`` for more members that never come.
CONNECT_BROKER_SETTINGS = {"group.initial.rebalance.delay.ms": "0"}


def connect_broker(factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The module broker of ``tests/conftest.py`` (same ``STROM_TEST_BOOTSTRAP`` /
    ``STROM_TEST_CLUSTER`` switches) with :data:`CONNECT_BROKER_SETTINGS`; a Connect module
    yields from it in its own ``broker`` fixture."""
    with module_broker(default_topology(), factory.mktemp("broker"),
                       CONNECT_BROKER_SETTINGS) as broker:  # fmt: skip
        yield broker


def wait_for(check: Callable[[], Any], what: str, timeout: float = 25.0,
             interval: float = 0.1) -> Any:  # fmt: skip
    """``check()``'s first truthy result; AssertionError naming ``what`` and the last result
    when ``timeout`` seconds pass without one."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")
