"""The topologies the integration tests run in: one broker process, or a 3-broker cluster.

See ``tests/conftest.py`` for how a module picks one (``STROM_TEST_CLUSTER=3``, the
``both_topologies`` marker). :func:`module_broker` starts either with the same settings, so a
module that needs its own broker settings (a group module's short session timeouts) still
runs in both.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from strom.testing import BrokerProcess

SINGLE = "single"
CLUSTER3 = "cluster3"


class ExternalBroker:
    """Stands in for :class:`BrokerProcess` when STROM_TEST_BOOTSTRAP names a running broker."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap


def default_topology() -> str:
    """"single", or "clusterN" when STROM_TEST_CLUSTER=N (N > 1) is set by hand."""
    size = int(os.environ.get("STROM_TEST_CLUSTER") or 0)
    return f"cluster{size}" if size > 1 else SINGLE


@contextmanager
def module_broker(topology: str, work_dir: Path, settings: Mapping[str, str] | None = None
                  ) -> Iterator[Any]:  # fmt: skip
    """A started broker (BrokerProcess) or cluster (ClusterProcess, "clusterN") with ``settings``
    on every broker; stopped (by PID) on exit. Both have ``.bootstrap``."""
    external = os.environ.get("STROM_TEST_BOOTSTRAP")
    if external:
        yield ExternalBroker(external)
        return
    if topology.startswith("cluster"):
        from strom.testing.cluster import ClusterProcess
        from strom.testing.zookeeper import zookeeper_available

        if not zookeeper_available():  # as tests/cluster: ZooKeeper is Debian's package
            pytest.skip("a cluster needs ZooKeeper: apt-get install -y zookeeper")

        size = int(topology.removeprefix("cluster"))
        merged = {"default.replication.factor": str(min(3, size)), "num.partitions": "4",
                  **(settings or {})}  # fmt: skip
        with ClusterProcess(work_dir / "cluster", size, settings=merged) as cluster:
            yield cluster
        return
    with BrokerProcess(work_dir / "data", settings=dict(settings or {})) as proc:
        yield proc
