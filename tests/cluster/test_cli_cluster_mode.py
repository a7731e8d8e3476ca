"""The cluster tools of the CLI against a 3-broker cluster: Leader/Replicas/Isr lines, the
partition filters and ``cluster health`` (a summary; under-replicated is not healthy) as
followers go away and return, ``cluster info``'s
controller and epoch, preferred-leader election. Runs once cluster mode, the controller and
replication are in the build."""

from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path

import pytest

from strom.config import known_keys
from strom.testing.cluster import ClusterProcess
from strom.testing.zookeeper import zookeeper_available
from tests.integration.cli_helpers import Cli

READY = (
    zookeeper_available()
    and "zookeeper.connect" in known_keys()
    and importlib.util.find_spec("strom.controller") is not None
)
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not READY, reason="needs ZooKeeper, cluster mode, controller, replication"),
]


def parts(cli: Cli, *args: str) -> dict[str, dict[str, str]]:
    """Partition lines of ``topic describe`` by partition number."""
    out = cli.ok("topic", "describe", *args)
    rows = [dict(f.split(": ", 1) for f in line.strip("\t").split("\t"))
            for line in out.splitlines() if line.startswith("\t")]  # fmt: skip
    return {r["Partition"]: r for r in rows}


def test_describe_and_health_follow_the_isr(tmp_path: Path) -> None:
    with ClusterProcess(tmp_path, brokers=3) as cluster:
        cli = Cli(cluster.bootstrap)
        cli.ok("topic", "create", "t", "--partitions", "3", "--replication-factor", "3",
               "--config", "min.insync.replicas=2")  # fmt: skip
        for p in range(3):
            cluster.wait_for_isr("t", p, {1, 2, 3})
        rows = parts(cli, "t")
        assert sorted(rows) == ["0", "1", "2"]
        for row in rows.values():
            assert sorted(row["Replicas"].split(",")) == ["1", "2", "3"]
            assert sorted(row["Isr"].split(",")) == ["1", "2", "3"]
            assert row["Leader"] == row["Replicas"].split(",")[0]  # preferred leaders at start
        assert {r["Leader"] for r in rows.values()} == {"1", "2", "3"}  # leaders spread
        assert cli.lines("cluster", "health")[0] == "Healthy: true"

        cluster.kill(3)
        for p in range(3):
            cluster.wait_for_isr("t", p, {1, 2}, timeout=60)
        under = parts(cli, "t", "--under-replicated-partitions")
        assert sorted(under) == ["0", "1", "2"] and all("3" not in r["Isr"] for r in under.values())
        assert parts(cli, "t", "--under-min-isr-partitions") == {}
        assert parts(cli, "t", "--unavailable-partitions") == {}
        # under-replicated is not healthy (as rpk): a summary, counted per topic, exit 1
        proc = cli.run("cluster", "health")
        assert proc.returncode == 1, proc.stdout + proc.stderr
        out = proc.stdout.splitlines()
        assert out[:2] == ["Healthy: false",
                           "Unhealthy reasons: brokers down, under-replicated partitions"], out
        assert "Brokers down: 3" in out and "Under-min-ISR partitions: 0" in out
        at = out.index("Under-replicated partitions: 3")
        assert out[at + 1] == "  t: 3 (0,1,2)", out

        cluster.kill(2)
        for p in range(3):
            cluster.wait_for_isr("t", p, {1}, timeout=60)
        assert sorted(parts(cli, "t", "--under-min-isr-partitions")) == ["0", "1", "2"]
        proc = cli.run("cluster", "health")
        assert proc.returncode == 1
        out = proc.stdout.splitlines()
        at = out.index("Under-min-ISR partitions: 3")
        assert out[at + 1] == "  t: 3 (0,1,2)", out

        cluster.start_broker(2)
        cluster.start_broker(3)
        for p in range(3):
            cluster.wait_for_isr("t", p, {1, 2, 3}, timeout=90)
        assert cli.lines("cluster", "health")[0] == "Healthy: true"
        # leadership sits on broker 1 now: a preferred election moves it back
        out = cli.lines("cluster", "elect-leaders", "--preferred", "--topic", "t")
        assert any(line.startswith("Successfully completed leader election (PREFERRED)")
                   for line in out), out  # fmt: skip
        rows = parts(cli, "t")
        assert all(r["Leader"] == r["Replicas"].split(",")[0] for r in rows.values())

        [info] = json.loads(cli.ok("cluster", "info", "--zookeeper", cluster.zk_connect,
                                   "--format", "json"))  # fmt: skip
        assert info["controller"] == cluster.controller_id()
        assert isinstance(info["controller_epoch"], int) and info["controller_epoch"] >= 1
        assert [b["id"] for b in info["brokers"]] == [1, 2, 3]


def test_describe_sizes_come_from_each_leader(tmp_path: Path) -> None:
    """``topic describe -p`` bootstrapped with broker 1 only: every partition's SIZE is its
    leader's log (DescribeLogDirs to that broker), equal to the ``.log`` files in that broker's
    data dir, not -1 for the partitions broker 1 does not host."""
    from confluent_kafka import Producer

    with ClusterProcess(tmp_path, brokers=3) as cluster:
        cli = Cli(cluster.broker(1).bootstrap)
        cli.ok("topic", "create", "sized", "--partitions", "3", "--replication-factor", "1")
        leaders = {p: cluster.wait_for_leader("sized", p) for p in range(3)}
        assert sorted(leaders.values()) == [1, 2, 3], leaders  # one partition on each broker
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                             "linger.ms": 0})  # fmt: skip
        counts = {0: 5, 1: 40, 2: 120}
        for p, n in counts.items():
            for i in range(n):
                producer.produce("sized", b"x" * 200 + b"%d-%d" % (p, i), partition=p)
        assert producer.flush(30) == 0
        del producer  # before the brokers stop: no reconnect noise
        rows = {r["partition"]: r for r in json.loads(
            cli.ok("topic", "describe", "sized", "-p", "--format", "json"))}  # fmt: skip
        assert sorted(rows) == [0, 1, 2]
        for p, row in rows.items():
            assert row["leader"] == leaders[p]
            assert row["messages"] == counts[p] and row["log_end_offset"] == counts[p]
            part_dir = cluster.broker(leaders[p]).data_dir / f"sized-{p}"
            on_disk = sum(f.stat().st_size for f in part_dir.glob("*.log"))
            assert on_disk > 0 and row["size"] == on_disk, (p, row, on_disk)
        assert rows[0]["size"] < rows[1]["size"] < rows[2]["size"]


def test_reassign_to_a_new_broker_and_log_dir(tmp_path: Path) -> None:
    """A plan moving a replica to a broker that does not host it yet, into that broker's
    second log dir: AlterReplicaLogDirs answers REPLICA_NOT_AVAILABLE until the reassignment
    has made the replica there (a new replica goes to the first, emptiest, dir), the CLI asks
    again until the move starts, verify ends with both the partition and the replica done, and
    every acknowledged record reads back from the new replica, once, in order."""
    from confluent_kafka import Producer

    from strom.admin import wire
    from tests.integration.clients import consume_all

    dirs = {i: [str((tmp_path / f"b{i}-{d}").resolve()) for d in "ab"] for i in (1, 2)}
    with ClusterProcess(tmp_path, brokers=2, broker_settings={
            i: {"log.dirs": ",".join(d)} for i, d in dirs.items()}) as cluster:  # fmt: skip
        cli = Cli(cluster.bootstrap)
        cluster.create_topic("moved", 1, 1)
        old = cluster.leader_of("moved", 0)
        new = 2 if old == 1 else 1
        target = dirs[new][1]
        acked: list[bytes] = []
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                             "enable.idempotence": True})  # fmt: skip
        for i in range(2000):
            producer.produce("moved", b"%05d" % i + b"x" * 500, partition=0,
                             on_delivery=lambda e, m: acked.append(m.value()) if not e else None)
        assert producer.flush(30) == 0 and len(acked) == 2000

        def copies(broker_id: int) -> dict[str, bool]:
            resp = wire.request(cluster.broker(broker_id).bootstrap, 35, 4, topics=None)
            return {str(r.log_dir): bool(p.is_future_key) for r in resp.results
                    for t in r.topics if t.name == "moved" for p in t.partitions}  # fmt: skip

        assert copies(new) == {}  # not hosted there yet: the first AlterReplicaLogDirs waits
        plan = tmp_path / "plan.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": "moved", "partition": 0, "replicas": [new], "log_dirs": [target]}]}))
        out = cli.lines("topic", "reassign", "execute", "--reassignment-json-file", str(plan),
                        "--timeout", "60")  # fmt: skip
        assert out[-1] == (f"Successfully started moving log directory to {target} for replica "
                           f"moved-0 with broker {new}")  # fmt: skip
        expected = ["Reassignment of partition moved-0 is completed.",
                    f"Reassignment of replica moved-0-{new} completed successfully."]
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            out = cli.lines("topic", "reassign", "verify", "--reassignment-json-file", str(plan))
            if [out[1], out[-1]] == expected:
                break
            time.sleep(0.5)
        assert [out[1], out[-1]] == expected, out
        assert copies(new) == {target: False}
        cluster.wait_for_leader("moved", 0)
        got = [m.value() for m in consume_all(cluster.bootstrap, "moved", [0], len(acked),
                                              timeout=60)]  # fmt: skip
        assert got == acked
