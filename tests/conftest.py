"""Shared fixtures: a real strom broker process per test module (or an external one).

Set ``STROM_TEST_BOOTSTRAP=host:port`` to run the integration tests against a broker that is
already running (handy for comparing strom with another Kafka-compatible broker), or
``STROM_TEST_CLUSTER=3`` to run the tests that use the module's ``broker`` against a local
cluster of that many brokers and a ZooKeeper (``strom.testing.cluster``) with
``default.replication.factor=3`` and ``num.partitions=4``, as issue 9 asks.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from strom.testing import BrokerProcess


class ExternalBroker:
    """Stands in for :class:`BrokerProcess` when STROM_TEST_BOOTSTRAP names a running broker."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess | ExternalBroker]:
    """A broker shared by the tests of one module; each test uses its own topic names."""
    external = os.environ.get("STROM_TEST_BOOTSTRAP")
    if external:
        yield ExternalBroker(external)
        return
    size = int(os.environ.get("STROM_TEST_CLUSTER") or 0)
    if size:
        from strom.testing.cluster import ClusterProcess

        settings = {"default.replication.factor": str(min(3, size)), "num.partitions": "4"}
        with ClusterProcess(tmp_path_factory.mktemp("cluster"), size, settings=settings) as c:
            yield c  # type: ignore[misc]
        return
    proc = BrokerProcess(tmp_path_factory.mktemp("broker") / "data")
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def fresh_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A broker of this test's own, for tests that kill, restart or reconfigure it."""
    proc = BrokerProcess(tmp_path / "data")
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    """A topic name unique to this test."""
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:60]
    return f"{base}-{uuid.uuid4().hex[:8]}"
