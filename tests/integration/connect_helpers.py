"""What the Connect integration tests share: a bounded wait and their module broker (their
``worker`` fixture is in ``tests/integration/conftest.py``)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from strom.testing import BrokerProcess

#: Every sink task is a new consumer group: without this each one would first wait Kafka's
#: default 3 s ``group.initial.rebalance.delay.ms`` for more members that never come.
CONNECT_BROKER_SETTINGS = {"group.initial.rebalance.delay.ms": "0"}


@dataclass
class _External:
    bootstrap: str


def connect_broker(factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The module broker of ``tests/conftest.py`` (same ``STROM_TEST_BOOTSTRAP`` /
    ``STROM_TEST_CLUSTER`` switches) with :data:`CONNECT_BROKER_SETTINGS`; a Connect module
    yields from it in its own ``broker`` fixture."""
    external = os.environ.get("STROM_TEST_BOOTSTRAP")
    if external:
        yield _External(external)
        return
    size = int(os.environ.get("STROM_TEST_CLUSTER") or 0)
    if size:
        from strom.testing.cluster import ClusterProcess

        settings = {"default.replication.factor": str(min(3, size)), "num.partitions": "4",
                    **CONNECT_BROKER_SETTINGS}
        with ClusterProcess(factory.mktemp("cluster"), size, settings=settings) as c:
            yield c
        return
    proc = BrokerProcess(factory.mktemp("broker") / "data", settings=CONNECT_BROKER_SETTINGS)
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


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
