"""Kafka's own JVM programs on strom: Connect's distributed worker and MirrorMaker 2.

The jars come from Maven Central through ``benchmarks/kafka/pom.xml`` (``benchmarks/kafka_jvm``
resolves them once into ``~/.m2`` and starts the processes). These tests take minutes (JVM
start-ups, Connect's rebalance delays, MirrorMaker's refresh intervals), so a plain ``pytest``
run skips them; select them by their marker::

    python -m pytest tests/jvm_connect -m jvm_connect

They need java (17+) and mvn on PATH (Debian: default-jdk-headless maven).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.kafka_jvm import MavenUnavailable, jvm_tools_missing, kafka_classpath
from strom.testing import BrokerProcess

MARKER = "jvm_connect"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    selected = MARKER in (config.getoption("markexpr") or "")
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(getattr(pytest.mark, MARKER))
            item.add_marker(pytest.mark.timeout(600))
            if not selected:
                item.add_marker(pytest.mark.skip(
                    reason=f"slow JVM tests: run them with -m {MARKER}"))


@pytest.fixture(scope="session")
def kafka_jars() -> str:
    """Kafka's resolved classpath (skips when java or mvn is missing)."""
    reason = jvm_tools_missing()
    if reason:
        pytest.skip(reason)
    try:
        return kafka_classpath()
    except MavenUnavailable as exc:
        pytest.fail(f"Maven could not resolve Kafka's jars: {exc}")


@pytest.fixture
def strom_broker(tmp_path: Path, kafka_jars: str) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path / "strom" / "data") as broker:
        yield broker
