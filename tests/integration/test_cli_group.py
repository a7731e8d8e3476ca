"""``strom group ...`` and ``strom consume --group`` against a real broker."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import uuid

import pytest

from tests.integration.cli_helpers import Cli, eventually, parse_table

#: Joining a group can take a while (rebalance delays); the consumers wait this long.
JOIN_TIMEOUT_MS = "60000"


@pytest.fixture(scope="module")
def cli(broker) -> Cli:  # type: ignore[no-untyped-def]
    """The CLI against the broker. The broker has a group coordinator: a group API that fails
    fails the test (it is not a reason to skip)."""
    return Cli(str(broker.bootstrap))


def setup_topic(cli: Cli, topic: str, values: list[str]) -> None:
    cli.ok("topic", "create", topic, "--partitions", "1")
    cli.ok("produce", topic, stdin="".join(v + "\n" for v in values))


def offsets_of(cli: Cli, group: str, topic: str) -> tuple[str, str, str]:
    """(CURRENT-OFFSET, LOG-END-OFFSET, LAG) of partition 0, parsed from the text table."""
    rows = [r for r in parse_table(cli.ok("group", "describe", group)) if r["TOPIC"] == topic]
    assert [(r["GROUP"], r["PARTITION"]) for r in rows] == [(group, "0")]
    return rows[0]["CURRENT-OFFSET"], rows[0]["LOG-END-OFFSET"], rows[0]["LAG"]


def reset(cli: Cli, group: str, *args: str) -> str:
    return cli.ok("group", "reset-offsets", group, *args)


def test_group_consume_describe_reset_delete(cli: Cli, topic_name: str) -> None:
    group = f"g-{topic_name}"
    values = [f"m{i}" for i in range(5)]
    setup_topic(cli, topic_name, values)

    out = cli.lines("consume", topic_name, "--group", group, "--from-beginning",
                    "--max-messages", "3", "--timeout-ms", JOIN_TIMEOUT_MS, timeout=120)  # fmt: skip
    assert out == values[:3]

    assert group in cli.lines("group", "list")
    assert group in [g["group"] for g in json.loads(cli.ok("group", "list", "--format", "json"))]

    assert eventually(lambda: offsets_of(cli, group, topic_name)[0] == "3")
    assert offsets_of(cli, group, topic_name) == ("3", "5", "2")
    row = parse_table(cli.ok("group", "describe", group))[0]
    assert (row["CONSUMER-ID"], row["HOST"], row["CLIENT-ID"]) == ("-", "-", "-")
    doc = json.loads(cli.ok("group", "describe", group, "--format", "json"))
    assert [
        (d["topic"], d["partition"], d["current_offset"], d["log_end_offset"], d["lag"])
        for d in doc
    ] == [(topic_name, 0, 3, 5, 2)]

    dry = reset(cli, group, "--topic", topic_name, "--to-offset", "1")
    assert parse_table(dry) == [
        {"GROUP": group, "TOPIC": topic_name, "PARTITION": "0", "NEW-OFFSET": "1"}
    ]
    assert offsets_of(cli, group, topic_name) == ("3", "5", "2")  # a dry run changes nothing

    done = reset(cli, group, "--topic", f"{topic_name}:0", "--to-offset", "1", "--execute")
    assert parse_table(done) == parse_table(dry)
    assert offsets_of(cli, group, topic_name) == ("1", "5", "4")

    plan = reset(cli, group, "--all-topics", "--shift-by", "2", "--execute", "--format", "json")
    assert json.loads(plan) == [
        {"group": group, "topic": topic_name, "partition": 0, "new_offset": 3}
    ]
    reset(cli, group, "--all-topics", "--to-latest", "--execute")
    assert offsets_of(cli, group, topic_name) == ("5", "5", "0")
    reset(cli, group, "--all-topics", "--to-datetime", "2000-01-01T00:00:00Z", "--execute")
    assert offsets_of(cli, group, topic_name) == ("0", "5", "5")

    assert cli.ok("group", "delete", group) == f"Deleted consumer group {group}.\n"
    assert group not in cli.lines("group", "list")


def test_active_group_members_state_refusal_and_ctrl_c(cli: Cli, topic_name: str) -> None:
    group = f"g-{topic_name}"
    setup_topic(cli, topic_name, ["a", "b"])
    consumer = subprocess.Popen(
        [sys.executable, "-m", "strom", "consume", topic_name, "--group", group,
         "--from-beginning", "--bootstrap-server", cli.bootstrap],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert consumer.stdout is not None
        assert [consumer.stdout.readline() for _ in range(2)] == ["a\n", "b\n"]

        line = cli.fail(
            "group", "reset-offsets", group, "--all-topics", "--to-earliest", "--execute"
        )
        assert group in line and "active" in line

        state = json.loads(cli.ok("group", "describe", group, "--state", "--format", "json"))[0]
        assert (state["state"], state["members"]) == ("Stable", 1)
        members = parse_table(cli.ok("group", "describe", group, "--members"))
        assert [(m["GROUP"], m["#PARTITIONS"], m["CLIENT-ID"]) for m in members] == [
            (group, "1", "strom-cli")
        ]
        row = parse_table(cli.ok("group", "describe", group))[0]
        assert row["CONSUMER-ID"] == members[0]["CONSUMER-ID"]
    finally:
        consumer.send_signal(signal.SIGINT)  # Ctrl-C: a clean exit that commits
        try:
            _, err = consumer.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            consumer.kill()
            raise
    assert consumer.returncode == 130, err  # stopped by the user (not "caught up")
    assert "Traceback" not in err, err
    assert eventually(lambda: offsets_of(cli, group, topic_name) == ("2", "2", "0"))


def test_group_errors_are_one_line(cli: Cli) -> None:
    missing = f"no-such-group-{uuid.uuid4().hex[:8]}"
    assert missing in cli.fail("group", "describe", missing)
    cli.fail("group", "list", "--state", "Sleepy")
    cli.fail("group", "reset-offsets", missing, "--all-topics", "--to-earliest")  # no offsets
    cli.fail("group", "reset-offsets", missing, "--topic", "t")  # no --to-* option


def test_exit_on_end_as_a_group_member(cli: Cli, topic_name: str) -> None:
    """Issue 21: ``-e`` was refused with ``--group``. As a member it exits once every partition
    assigned to it is read to its end, having committed what it printed: a second run of the
    same group prints only what came since."""
    group = f"g-{topic_name}"
    cli.ok("topic", "create", topic_name, "--partitions", "2")
    cli.ok("produce", topic_name, "-f", "%p %v\\n", stdin="0 a\n1 b\n0 c\n")
    first = cli.lines("consume", topic_name, "--group", group, "-o", "start", "-e",
                      timeout=120)  # fmt: skip
    assert sorted(first) == ["a", "b", "c"]
    assert eventually(lambda: offsets_of_all(cli, group) == {"0": "2", "1": "1"})
    assert cli.lines("consume", topic_name, "--group", group, "-e", timeout=120) == []
    cli.ok("produce", topic_name, "-f", "%p %v\\n", stdin="1 d\n")
    assert cli.lines("consume", topic_name, "--group", group, "-e", timeout=120) == ["d"]


def offsets_of_all(cli: Cli, group: str) -> dict[str, str]:
    return {r["PARTITION"]: r["CURRENT-OFFSET"] for r in parse_table(cli.ok("group", "describe",
                                                                             group))}  # fmt: skip
