"""Kafka's own ``kafka-share-groups.sh`` (``ShareGroupCommand``, kafka-tools 4.4) against strom.

A share group reads a two-partition topic through confluent-kafka's ShareConsumer; the tool then
lists it, describes its offsets with lag (``GROUP TOPIC PARTITION START-OFFSET LAG``), members
and state, resets its offsets, deletes its offsets for the topic and deletes it. Each output is
checked for its values, not only its exit code.
"""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from tests.integration.clients import create_topic, produce
from tests.integration.share_helpers import Worker, set_group_configs, wait_for
from tests.jvm.jvm import JVM_FLAGS, classpath
from tests.topology import module_broker

pytestmark = [pytest.mark.jvm, pytest.mark.timeout(300)]
TOOL = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with module_broker("single", tmp_path_factory.mktemp("share-tools")) as b:
        yield b


def _tool(bootstrap: str, *args: str) -> list[list[str]]:
    """The tool's non-empty output lines, split on whitespace (exit code 0 asserted); the rows
    after the header sorted (the tool prints partitions in hash-map order)."""
    done = subprocess.run(["java", *JVM_FLAGS, "-cp", classpath(), TOOL, "--bootstrap-server",
                           bootstrap, *args], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    rows = [line.split() for line in done.stdout.splitlines() if line.strip()]
    return rows[:1] + sorted(rows[1:])


def test_kafka_share_groups_sh(broker: Any, topic_name: str) -> None:
    group = f"g-{topic_name}"
    create_topic(broker.bootstrap, topic_name, 2)
    set_group_configs(broker.bootstrap, group, share_auto_offset_reset="earliest")
    produce(broker.bootstrap, topic_name, ({"value": f"v{i}".encode(), "partition": i % 2}
                                           for i in range(10)))  # fmt: skip
    worker = Worker(broker.bootstrap, group, topic_name, "w").start()
    try:
        wait_for(lambda: len(worker.deliveries) >= 10, 60, "the 10 records")
        members = _tool(broker.bootstrap, "--describe", "--group", group, "--members")
        assert members[0] == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
                              "ASSIGNMENT"]  # fmt: skip
        assert [(m[0], m[-2], m[-1]) for m in members[1:]] == [(group, "2", f"{topic_name}:0,1")]
    finally:
        worker.stop()
    produce(broker.bootstrap, topic_name, ({"value": b"more", "partition": 0} for _ in range(3)))
    offsets = _tool(broker.bootstrap, "--describe", "--group", group)
    assert offsets == [["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"],
                       [group, topic_name, "0", "5", "3"], [group, topic_name, "1", "5", "0"]]
    plan = _tool(broker.bootstrap, "--reset-offsets", "--group", group, "--topic", topic_name,
                 "--to-earliest", "--execute")  # fmt: skip
    assert plan[1:] == [[group, topic_name, "0", "0"], [group, topic_name, "1", "0"]]
    assert _tool(broker.bootstrap, "--describe", "--group", group)[1:] == [
        [group, topic_name, "0", "0", "8"], [group, topic_name, "1", "0", "5"]]
    assert _tool(broker.bootstrap, "--delete-offsets", "--group", group, "--topic",
                 topic_name)[1:] == [[topic_name, "Successful"]]  # fmt: skip
    deleted = _tool(broker.bootstrap, "--delete", "--group", group)
    assert "successful." in deleted[-1]
    assert [group] not in _tool(broker.bootstrap, "--list")
