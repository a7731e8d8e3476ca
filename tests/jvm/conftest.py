"""The 3-broker cluster the JVM tests share (one start instead of one per module).

Tests that kill or stop one of its brokers start it again before they end (in ``finally``),
so the next module finds all three. Settings: the test topology's (``tests/topology.py``:
``default.replication.factor=3``, ``num.partitions=4``) and a short
``replica.lag.time.max.ms`` so a dead follower leaves the ISR in seconds.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.topology import CLUSTER3, module_broker

CLUSTER_SETTINGS = {"replica.lag.time.max.ms": "3000", "auto.leader.rebalance.enable": "false"}


@pytest.fixture(scope="package")
def jvm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with module_broker(CLUSTER3, tmp_path_factory.mktemp("jvm-cluster"),
                       CLUSTER_SETTINGS) as cluster:  # fmt: skip
        yield cluster
