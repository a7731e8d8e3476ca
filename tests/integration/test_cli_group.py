"""``strom group ...`` and ``strom consume --group`` against a real broker.

Skipped (with the reason) only when a quick probe shows the broker has no consumer-group
support yet.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from tests.integration.cli_helpers import assert_clean_error, eventually, ok, parse_table, strom

#: Joining a group can take a while (rebalance delays); the consumers wait this long.
JOIN_TIMEOUT_MS = "60000"


@pytest.fixture(scope="module")
def boot(broker) -> str:  # type: ignore[no-untyped-def]
    """The broker's bootstrap, after probing that it answers the group admin APIs."""
    bootstrap = str(broker.bootstrap)
    admin = AdminClient({"bootstrap.servers": bootstrap,
                         "socket.connection.setup.timeout.ms": 5000})
    try:
        admin.list_consumer_groups(request_timeout=5).result(timeout=8)
        probe = f"probe-{uuid.uuid4().hex[:8]}"
        admin.describe_consumer_groups([probe], request_timeout=5)[probe].result(timeout=8)
    except (KafkaException, TimeoutError, Exception) as exc:  # noqa: BLE001 - reason shown
        pytest.skip(f"broker at {bootstrap} has no consumer-group support yet: {exc!r}")
    return bootstrap


def setup_topic(boot: str, topic: str, values: list[str]) -> None:
    ok(strom("topic", "create", topic, "--partitions", "1", "--bootstrap-server", boot))
    ok(strom("produce", topic, "--bootstrap-server", boot, stdin="".join(v + "\n" for v in values)))


def describe_rows(boot: str, group: str) -> list[dict[str, str]]:
    return parse_table(ok(strom("group", "describe", group, "--bootstrap-server", boot)))


def offsets_of(boot: str, group: str, topic: str) -> tuple[str, str, str]:
    rows = [r for r in describe_rows(boot, group) if r["TOPIC"] == topic]
    assert [r["PARTITION"] for r in rows] == ["0"]
    return rows[0]["CURRENT-OFFSET"], rows[0]["LOG-END-OFFSET"], rows[0]["LAG"]


def test_group_consume_describe_reset_delete(boot: str, topic_name: str) -> None:
    group = f"g-{topic_name}"
    values = [f"m{i}" for i in range(5)]
    setup_topic(boot, topic_name, values)

    out = ok(strom("consume", topic_name, "--group", group, "--from-beginning",
                   "--max-messages", "3", "--timeout-ms", JOIN_TIMEOUT_MS,
                   "--bootstrap-server", boot, timeout=120))
    assert out.splitlines() == values[:3]

    assert group in ok(strom("group", "list", "--bootstrap-server", boot)).splitlines()
    listed = json.loads(ok(strom("group", "list", "--format", "json", "--bootstrap-server", boot)))
    assert group in [g["group"] for g in listed]

    rows = eventually(lambda: _described(boot, group, topic_name, "3"))
    assert rows[0]["GROUP"] == group
    assert offsets_of(boot, group, topic_name) == ("3", "5", "2")
    assert (rows[0]["CONSUMER-ID"], rows[0]["HOST"], rows[0]["CLIENT-ID"]) == ("-", "-", "-")
    doc = json.loads(ok(strom("group", "describe", group, "--format", "json",
                              "--bootstrap-server", boot)))
    assert [(d["topic"], d["partition"], d["current_offset"], d["log_end_offset"], d["lag"])
            for d in doc] == [(topic_name, 0, 3, 5, 2)]

    dry = ok(strom("group", "reset-offsets", group, "--topic", topic_name, "--to-offset", "1",
                   "--bootstrap-server", boot))
    assert parse_table(dry) == [{"GROUP": group, "TOPIC": topic_name, "PARTITION": "0",
                                 "NEW-OFFSET": "1"}]
    assert offsets_of(boot, group, topic_name) == ("3", "5", "2")  # dry run changed nothing

    done = ok(strom("group", "reset-offsets", group, "--topic", f"{topic_name}:0", "--to-offset",
                    "1", "--execute", "--bootstrap-server", boot))
    assert parse_table(done) == parse_table(dry)
    assert offsets_of(boot, group, topic_name) == ("1", "5", "4")

    plan = json.loads(ok(strom("group", "reset-offsets", group, "--all-topics", "--shift-by", "2",
                               "--execute", "--format", "json", "--bootstrap-server", boot)))
    assert plan == [{"group": group, "topic": topic_name, "partition": 0, "new_offset": 3}]
    ok(strom("group", "reset-offsets", group, "--all-topics", "--to-latest", "--execute",
             "--bootstrap-server", boot))
    assert offsets_of(boot, group, topic_name) == ("5", "5", "0")
    ok(strom("group", "reset-offsets", group, "--all-topics", "--to-earliest", "--execute",
             "--bootstrap-server", boot))
    assert offsets_of(boot, group, topic_name) == ("0", "5", "5")

    assert ok(strom("group", "delete", group, "--bootstrap-server", boot)).strip() == (
        f"Deleted consumer group {group}."
    )
    assert group not in ok(strom("group", "list", "--bootstrap-server", boot)).splitlines()


def _described(boot: str, group: str, topic: str, current: str) -> list[dict[str, str]]:
    rows = [r for r in describe_rows(boot, group) if r["TOPIC"] == topic]
    assert rows and rows[0]["CURRENT-OFFSET"] == current
    return rows


def test_active_group_members_state_refusal_and_ctrl_c(boot: str, topic_name: str) -> None:
    group = f"g-{topic_name}"
    setup_topic(boot, topic_name, ["a", "b"])
    consumer = subprocess.Popen(
        [sys.executable, "-m", "strom", "consume", topic_name, "--group", group,
         "--from-beginning", "--bootstrap-server", boot],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert consumer.stdout is not None
        got = [consumer.stdout.readline().rstrip("\n") for _ in range(2)]
        assert got == ["a", "b"]

        line = assert_clean_error(strom("group", "reset-offsets", group, "--all-topics",
                                        "--to-earliest", "--execute", "--bootstrap-server", boot))
        assert group in line and "active" in line

        state = json.loads(ok(strom("group", "describe", group, "--state", "--format", "json",
                                    "--bootstrap-server", boot)))
        assert (state["state"], state["members"]) == ("Stable", 1)
        members = parse_table(ok(strom("group", "describe", group, "--members",
                                       "--bootstrap-server", boot)))
        assert len(members) == 1 and members[0]["#PARTITIONS"] == "1"
        assert members[0]["CLIENT-ID"] == "strom-cli"
        rows = describe_rows(boot, group)
        assert rows[0]["CONSUMER-ID"] == members[0]["CONSUMER-ID"]
    finally:
        consumer.send_signal(signal.SIGINT)
        try:
            _, err = consumer.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            consumer.kill()
            raise
    assert consumer.returncode == 0, err
    assert "Traceback" not in err, err
    time.sleep(0.5)
    assert offsets_of(boot, group, topic_name) == ("2", "2", "0")


def test_group_errors_are_one_line(boot: str) -> None:
    missing = f"no-such-group-{uuid.uuid4().hex[:8]}"
    assert_clean_error(strom("group", "describe", missing, "--bootstrap-server", boot))
    assert_clean_error(strom("group", "list", "--state", "Sleepy", "--bootstrap-server", boot))
    assert_clean_error(strom("group", "reset-offsets", missing, "--all-topics", "--to-earliest",
                             "--bootstrap-server", boot))
    assert_clean_error(strom("group", "reset-offsets", missing, "--topic", "t",
                             "--bootstrap-server", boot))  # no --to-*
