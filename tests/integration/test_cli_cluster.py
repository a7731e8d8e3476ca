"""The cluster tools of the CLI against a single real broker (and ``cluster up|down`` for real):
describe filters, health with min ISR, replication factor pass-through, elect-leaders,
reassign, the local cluster's lifecycle."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from strom.admin import wire
from strom.testing import BrokerProcess, free_port
from tests.integration.cli_helpers import Cli, assert_clean_error, side_by_side, strom


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A single node, whatever STROM_TEST_CLUSTER says: these tests check a single node's
    answers (replication factor 3 refused, every leader broker 1, a reassignment to [1]);
    their 3-broker counterparts are in tests/cluster/test_cli_cluster_mode.py."""
    with BrokerProcess(tmp_path_factory.mktemp("single") / "data") as proc:
        yield proc


@pytest.fixture
def cli(single: BrokerProcess) -> Cli:
    return Cli(str(single.bootstrap))


def supports(bootstrap: str, api_key: int) -> bool:
    """Whether the broker advertises ``api_key`` (ApiVersions v3)."""
    resp = wire.request(bootstrap, 18, 3, client_software_name="t", client_software_version="1")
    return any(int(k.api_key) == api_key for k in resp.api_keys)


def partition_lines(output: str) -> list[dict[str, str]]:
    return [dict(f.split(": ", 1) for f in line.strip("\t").split("\t"))
            for line in output.splitlines() if line.startswith("\t")]  # fmt: skip


def test_describe_filters_on_a_healthy_topic_print_nothing(cli: Cli, topic_name: str) -> None:
    cli.ok("topic", "create", topic_name, "--partitions", "2", "--replication-factor", "1")
    lines = partition_lines(cli.ok("topic", "describe", topic_name))
    assert [(p["Partition"], p["Leader"], p["Replicas"], p["Isr"]) for p in lines] == [
        ("0", "1", "1", "1"), ("1", "1", "1", "1"),
    ]
    flags = ("--under-replicated-partitions", "--under-min-isr-partitions",
             "--unavailable-partitions")  # fmt: skip
    outputs = side_by_side(
        *[lambda f=f: cli.ok("topic", "describe", topic_name, f) for f in flags],  # type: ignore[misc]
        lambda: cli.ok("topic", "describe", topic_name, flags[1], "--format", "json"),
        # without names a filter looks at every topic: still nothing on a healthy node
        lambda: cli.ok("topic", "describe", "--unavailable-partitions"),
    )
    assert outputs == ["", "", "", "[]\n", ""]


def test_describe_without_names_or_filter_is_a_clean_error(cli: Cli) -> None:
    assert "topic" in cli.fail("topic", "describe")


def test_replication_factor_is_passed_through(cli: Cli, topic_name: str) -> None:
    line = cli.fail("topic", "create", topic_name, "--replication-factor", "3")
    assert "INVALID_REPLICATION_FACTOR" in line or "replication factor" in line.lower(), line


def test_under_min_isr_shows_in_describe_and_fails_health(tmp_path: Path, topic_name: str) -> None:
    with BrokerProcess(tmp_path / "data") as broker:
        cli = Cli(broker.bootstrap)
        assert cli.lines("cluster", "health")[0] == "Healthy: true"
        # one replica can never satisfy min.insync.replicas=2: acks=all would be refused
        cli.ok("topic", "create", topic_name, "--partitions", "2",
               "--config", "min.insync.replicas=2")  # fmt: skip
        lines = partition_lines(cli.ok("topic", "describe", topic_name,
                                       "--under-min-isr-partitions"))  # fmt: skip
        assert [(p["Topic"], p["Partition"], p["Isr"]) for p in lines] == [
            (topic_name, "0", "1"), (topic_name, "1", "1"),
        ]
        assert cli.ok("topic", "describe", topic_name, "--under-replicated-partitions") == ""
        proc = cli.run("cluster", "health")
        assert proc.returncode == 1, proc.stdout + proc.stderr
        out = proc.stdout.splitlines()
        assert out[:2] == ["Healthy: false", "Unhealthy reasons: under-min-ISR partitions"], out
        at = out.index("Under-min-ISR partitions: 2")
        assert out[at + 1] == f"  {topic_name}: 2 (0,1)", out  # counted per topic
        assert "Offline partitions: 0" in out and "Under-replicated partitions: 0" in out
        [doc] = json.loads(cli.run("cluster", "health", "--format", "json").stdout)
        assert doc["healthy"] is False
        assert doc["unhealthy_reasons"] == ["under-min-ISR partitions"]
        assert doc["under_min_isr_partitions"] == [f"{topic_name}-0", f"{topic_name}-1"]
        assert doc["offline_partitions"] == [] and doc["brokers_down"] == []
        cli.ok("topic", "alter-config", topic_name, "min.insync.replicas=1")
        assert cli.lines("cluster", "health")[0] == "Healthy: true"


def test_elect_leaders(cli: Cli, topic_name: str) -> None:
    cli.ok("topic", "create", topic_name, "--partitions", "2")
    assert "--topic" in cli.fail("cluster", "elect-leaders", "--partition", "0")
    assert "no partition 5" in cli.fail("cluster", "elect-leaders", "--topic", topic_name,
                                        "--partition", "5")  # fmt: skip
    if not supports(cli.bootstrap, 43):
        # the broker has no ElectLeaders yet: one clean line, no traceback
        cli.fail("cluster", "elect-leaders", "--topic", topic_name)
        return
    out = cli.lines("cluster", "elect-leaders", "--preferred", "--topic", topic_name)
    assert out == [f"Valid replica already elected for partitions {topic_name}-0, {topic_name}-1"]


def test_reassign_generate_execute_verify(cli: Cli, topic_name: str, tmp_path: Path) -> None:
    cli.ok("topic", "create", topic_name, "--partitions", "3")
    move = tmp_path / "move.json"
    move.write_text(json.dumps({"version": 1, "topics": [{"topic": topic_name}]}))
    out = cli.lines("topic", "reassign", "generate", "--topics-to-move-json-file", str(move),
                    "--broker-list", "1")  # fmt: skip
    assert out[0] == "Current partition replica assignment"
    assert out[3] == "Proposed partition reassignment configuration"
    proposed = json.loads(out[4])
    assert proposed == {"version": 1, "partitions": [
        {"topic": topic_name, "partition": p, "replicas": [1], "log_dirs": ["any"]}
        for p in range(3)
    ]}
    assert "unknown broker id(s) 7" in cli.fail(
        "topic", "reassign", "generate", "--topics-to-move-json-file", str(move),
        "--broker-list", "1,7")
    plan = tmp_path / "plan.json"
    plan.write_text(out[4])
    if not supports(cli.bootstrap, 45):
        cli.fail("topic", "reassign", "execute", "--reassignment-json-file", str(plan))
        return
    out = cli.lines("topic", "reassign", "execute", "--reassignment-json-file", str(plan))
    assert out[-1].startswith("Successfully started partition reassignments for ")
    out = cli.lines("topic", "reassign", "verify", "--reassignment-json-file", str(plan))
    assert out[0] == "Status of partition reassignment:"
    assert out[1:] == [f"Reassignment of partition {topic_name}-{p} is completed."
                       for p in range(3)]  # fmt: skip


def test_reassign_bad_files_are_clean_errors(cli: Cli, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert "not valid JSON" in cli.fail("topic", "reassign", "verify",
                                        "--reassignment-json-file", str(bad))  # fmt: skip
    bad.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "t", "partition": 0, "replicas": [1, 1]}]}))
    assert "distinct" in cli.fail("topic", "reassign", "execute",
                                  "--reassignment-json-file", str(bad))  # fmt: skip
    assert "cannot read" in cli.fail("topic", "reassign", "execute", "--reassignment-json-file",
                                     str(tmp_path / "missing.json"))  # fmt: skip


def _zookeeper_installed() -> bool:
    try:
        from strom.testing.zookeeper import zookeeper_available
    except ImportError:
        return False
    return bool(zookeeper_available())


def _alive(pid: int) -> bool:
    from strom.pidfile import start_time

    return start_time(pid) is not None


def _get(url: str) -> int:
    """The HTTP status of GET ``url`` (0: no answer)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return 0


@pytest.mark.skipif(not _zookeeper_installed(), reason="needs the zookeeper package")
def test_cluster_up_info_down(tmp_path: Path) -> None:
    data_dir = tmp_path / "strom-cluster"  # cluster up's default, relative to tmp_path
    port, admin = free_port(), free_port()
    proc = strom("cluster", "up", "--brokers", "1", "--base-port", str(port),
                 "--admin-base-port", str(admin), "--data-dir", str(data_dir), "--format",
                 "json", timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    [state] = json.loads(proc.stdout)
    pids = [p["pid"] for p in state["processes"]]
    try:
        assert state["bootstrap"] == f"127.0.0.1:{port}"
        assert [p["role"] for p in state["processes"]] == ["zookeeper", "broker"]
        assert all(_alive(pid) for pid in pids)
        # each broker serves /metrics and /health on its own admin port (issue 21)
        assert state["processes"][1]["admin"] == f"127.0.0.1:{admin}"
        assert _get(f"http://127.0.0.1:{admin}/health/live") == 200
        cli = Cli(state["bootstrap"])
        # the controller epoch, read from ZooKeeper (written here if no controller did yet)
        from kazoo.client import KazooClient

        zk = KazooClient(hosts=state["zookeeper"])
        zk.start(timeout=30)
        try:
            if zk.exists("/controller_epoch") is None:
                zk.create("/controller_epoch", b"7")
            epoch = int(zk.get("/controller_epoch")[0])
        finally:
            zk.stop()
            zk.close()
        [doc] = json.loads(cli.ok("cluster", "info", "--zookeeper", state["zookeeper"],
                                  "--format", "json"))  # fmt: skip
        assert doc["controller_epoch"] == epoch
        assert [(b["id"], b["port"]) for b in doc["brokers"]] == [(1, port)]
        assert f"Controller epoch: {epoch}" in cli.lines("cluster", "info", "--zookeeper",
                                                         state["zookeeper"])  # fmt: skip
        # without --zookeeper: the ZooKeeper 'cluster up' recorded, from --data-dir or from
        # the default ./strom-cluster
        no_env = {"STROM_ZOOKEEPER": ""}
        for where, cwd in ((["--data-dir", str(data_dir)], None), ([], tmp_path)):
            info = strom("cluster", "info", "--bootstrap-server", state["bootstrap"], *where,
                         "--format", "json", env=no_env, cwd=cwd)  # fmt: skip
            assert info.returncode == 0 and info.stderr == "", info.stderr
            assert json.loads(info.stdout)[0]["controller_epoch"] == epoch, (where, info.stdout)
        text = strom("cluster", "info", "--bootstrap-server", state["bootstrap"], env=no_env,
                     cwd=tmp_path).stdout.splitlines()  # fmt: skip
        assert f"Controller epoch: {epoch}" in text
        # a record of another cluster lends it nothing (its ZooKeeper is not even asked)
        other = tmp_path / "other"
        other.mkdir()
        (other / "cluster.json").write_text(json.dumps({
            "version": 1, "zookeeper": "127.0.0.1:1", "bootstrap": "127.0.0.1:1",
            "processes": [{"role": "broker", "id": 1, "pid": 1, "start_time": 1,
                           "address": "127.0.0.1:1"}]}))  # fmt: skip
        info = strom("cluster", "info", "--bootstrap-server", state["bootstrap"], "--data-dir",
                     str(other), "--format", "json", env=no_env)  # fmt: skip
        assert info.returncode == 0 and info.stderr == "", info.stderr
        assert json.loads(info.stdout)[0]["controller_epoch"] is None
        assert "Controller epoch: -" in cli.lines("cluster", "info", "--data-dir", str(other))
        # a second 'up' on the same data dir refuses (the first is still running)
        line = assert_clean_error(strom("cluster", "up", "--brokers", "1", "--base-port",
                                        str(free_port()), "--data-dir", str(data_dir)))  # fmt: skip
        assert "still running" in line
    finally:
        down = strom("cluster", "down", "--data-dir", str(data_dir), timeout=120)
    assert down.returncode == 0, down.stderr
    assert down.stdout.splitlines() == [
        f"broker 1 (pid {pids[1]}) stopped", f"ZooKeeper (pid {pids[0]}) stopped",
    ]
    assert not any(_alive(pid) for pid in pids)
    assert not (data_dir / "cluster.json").exists()
    assert "no cluster was started" in assert_clean_error(
        strom("cluster", "down", "--data-dir", str(data_dir)))


@pytest.mark.skipif(not _zookeeper_installed(), reason="needs the zookeeper package")
def test_cluster_stop_start_restart_and_down_of_a_broker_started_by_hand(tmp_path: Path) -> None:
    """Issue 21: one broker of a local cluster stops and starts again from the data dir (same
    port, same data, its admin port printed), and ``down`` stops a broker restarted by hand
    too (its strom.pid), then ZooKeeper."""
    data_dir = tmp_path / "cl"
    port, admin = free_port(), free_port()
    up = strom("cluster", "up", "--brokers", "1", "--base-port", str(port), "--admin-base-port",
               str(admin), "--data-dir", str(data_dir), timeout=120)  # fmt: skip
    assert up.returncode == 0, up.stderr
    assert f"Started broker 1 at 127.0.0.1:{port} " in up.stdout
    assert f"metrics and health on http://127.0.0.1:{admin}" in up.stdout
    state = json.loads((data_dir / "cluster.json").read_text())
    zk_pid, first = (p["pid"] for p in state["processes"])
    hand: subprocess.Popen[bytes] | None = None
    try:
        cli = Cli(f"127.0.0.1:{port}")
        cli.ok("topic", "create", "kept", "-p", "1")
        cli.ok("produce", "kept", stdin="a\nb\n")
        pid_file = data_dir / "broker-1" / "strom.pid"
        assert json.loads(pid_file.read_text())["pid"] == first

        out = strom("cluster", "stop", "--broker", "1", "--data-dir", str(data_dir), timeout=60)
        assert out.stdout == f"broker 1 (pid {first}) stopped\n", out.stderr
        assert not _alive(first) and not pid_file.exists()
        assert "not running" in assert_clean_error(
            strom("cluster", "stop", "--broker", "1", "--data-dir", str(data_dir)))
        assert "not part of the cluster" in assert_clean_error(
            strom("cluster", "start", "--broker", "2", "--data-dir", str(data_dir)))

        out = strom("cluster", "start", "--broker", "1", "--data-dir", str(data_dir),
                    "--format", "json", timeout=120)  # fmt: skip
        assert out.returncode == 0, out.stderr
        [started] = json.loads(out.stdout)
        second = started["pid"]
        assert (started["address"], started["admin"]) == (f"127.0.0.1:{port}",
                                                          f"127.0.0.1:{admin}")
        assert second != first and _alive(second)
        assert cli.lines("consume", "kept", "-o", "start", "-e") == ["a", "b"]  # same data
        assert _get(f"http://127.0.0.1:{admin}/health/live") == 200

        out = strom("cluster", "restart", "--broker", "1", "--data-dir", str(data_dir),
                    timeout=120)  # fmt: skip
        assert out.returncode == 0, out.stderr
        third = json.loads(pid_file.read_text())["pid"]
        assert not _alive(second) and _alive(third)
        assert out.stdout.startswith(f"broker 1 (pid {third}) started at 127.0.0.1:{port}")

        # stopped, then started by hand: 'down' still finds it (its strom.pid)
        strom("cluster", "stop", "--broker", "1", "--data-dir", str(data_dir), timeout=60)
        hand = subprocess.Popen(
            [sys.executable, "-m", "strom", "serve", "--data-dir", str(data_dir / "broker-1"),
             "--listen", f"127.0.0.1:{port}", "--zookeeper", state["zookeeper"],
             "--broker-id", "1", "--admin-listener="],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while not pid_file.exists() or cli.run("topic", "list").returncode != 0:
            assert time.monotonic() < deadline and hand.poll() is None, "hand start failed"
            time.sleep(0.3)
    finally:
        down = strom("cluster", "down", "--data-dir", str(data_dir), timeout=120)
        if hand is not None and hand.poll() is None:
            hand.kill()
        if hand is not None:
            hand.wait(30)
    assert down.returncode == 0, down.stderr
    assert hand is not None
    assert down.stdout.splitlines() == [f"broker 1 (pid {hand.pid}) stopped",
                                        f"ZooKeeper (pid {zk_pid}) stopped"]
    assert hand.returncode == 0  # a clean shutdown (SIGTERM), not our kill in finally
    assert not _alive(zk_pid)


def test_cluster_down_leaves_a_reused_pid_alone(tmp_path: Path) -> None:
    """A recorded PID whose start time no longer matches is somebody else's: not signalled."""
    data_dir = tmp_path / "cluster"
    data_dir.mkdir()
    me = os.getpid()
    (data_dir / "cluster.json").write_text(json.dumps({"version": 1, "processes": [
        {"role": "broker", "id": 1, "pid": me, "start_time": 1, "address": "x:1"}]}))
    proc = strom("cluster", "down", "--data-dir", str(data_dir))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [f"broker 1 (pid {me}) was not running"]


def _where(bootstrap: str, topic: str, partition: int) -> dict[str, bool]:
    """log dir -> is_future for every copy of the partition on the broker."""
    resp = wire.request(bootstrap, 35, 4, topics=None)
    return {str(r.log_dir): bool(p.is_future_key) for r in resp.results for t in r.topics
            for p in t.partitions if t.name == topic and p.partition_index == partition}


def test_reassign_with_log_dirs(tmp_path: Path, topic_name: str) -> None:
    """One broker, two log.dirs: a plan naming a log dir moves the replica there (execute),
    verify says "in progress" while the copy exists (throttled to 512 KB/s: 8 MB would take
    ~16 s, time enough for the CLI calls in between on a loaded machine; the test lifts the
    throttle rather than wait)
    and "completed" once it lives there; a dir the broker does not have, or a relative path, is
    one line, exit 1, and nothing moves; cancel stops a move in progress; every record reads
    back identical, once, in order."""
    from confluent_kafka import Producer

    from tests.integration.clients import consume_all

    a, b = (tmp_path / "a").resolve(), (tmp_path / "b").resolve()
    with BrokerProcess(tmp_path / "data", settings={
            "log.dirs": f"{a},{b}",
            "replica.alter.log.dirs.io.max.bytes.per.second": str(512 << 10)}) as broker:  # fmt: skip
        cli = Cli(broker.bootstrap)
        cli.ok("topic", "create", topic_name, "--partitions", "1")
        sent = [b"%05d-" % i + bytes([i % 251]) * 1000 for i in range(8000)]
        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
        for value in sent:
            producer.produce(topic_name, value, partition=0)
            producer.poll(0)
        assert producer.flush(30) == 0
        [source] = _where(broker.bootstrap, topic_name, 0)
        target = str(b) if source == str(a) else str(a)
        plan = tmp_path / "plan.json"

        def write_plan(log_dir: str) -> None:
            plan.write_text(json.dumps({"version": 1, "partitions": [
                {"topic": topic_name, "partition": 0, "replicas": [1], "log_dirs": [log_dir]}]}))

        write_plan("/no/such/dir")
        err = cli.fail("topic", "reassign", "execute", "--reassignment-json-file", str(plan))
        assert err == (f"strom: error: log dir /no/such/dir for replica {topic_name}-0-1 is not one of "
                       f"broker 1's log dirs ({a}, {b})"), err
        write_plan("relative/dir")
        assert "not an absolute path" in cli.fail(
            "topic", "reassign", "execute", "--reassignment-json-file", str(plan))
        assert _where(broker.bootstrap, topic_name, 0) == {source: False}  # nothing moved

        write_plan(target)
        out = cli.lines("topic", "reassign", "execute", "--reassignment-json-file", str(plan))
        assert out[-2].startswith("Successfully started partition reassignment")
        assert out[-1] == (f"Successfully started moving log directory to {target} for replica "
                           f"{topic_name}-0 with broker 1")  # fmt: skip
        assert _where(broker.bootstrap, topic_name, 0) == {source: False, target: True}
        out = cli.lines("topic", "reassign", "verify", "--reassignment-json-file", str(plan))
        assert out[-2:] == ["Reassignment of replica log directories:",
                            f"Reassignment of replica {topic_name}-0-1 is still in progress."]
        rate = "replica.alter.log.dirs.io.max.bytes.per.second"
        cli.ok("cluster", "config", "set", "--broker", "1", f"{rate}={1 << 30}")  # a dynamic one
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "completed" not in out[-1]:
            time.sleep(0.5)
            out = cli.lines("topic", "reassign", "verify", "--reassignment-json-file", str(plan))
        assert out[-1] == f"Reassignment of replica {topic_name}-0-1 completed successfully."
        assert _where(broker.bootstrap, topic_name, 0) == {target: False}
        rows = json.loads(cli.ok("topic", "reassign", "verify", "--reassignment-json-file",
                                 str(plan), "--format", "json"))  # fmt: skip
        assert {"topic": topic_name, "partition": 0, "broker": 1, "status": "completed",
                "log_dir": target, "current_log_dir": target, "future_log_dir": None} in rows

        cli.ok("cluster", "config", "delete", "--broker", "1", rate)  # 512 KB/s again
        write_plan(source)  # back, then cancelled while it copies
        cli.ok("topic", "reassign", "execute", "--reassignment-json-file", str(plan))
        out = cli.lines("topic", "reassign", "cancel", "--reassignment-json-file", str(plan))
        assert out == ["None of the specified partition reassignments are active.",
                       f"Successfully started moving log directory to {target} for replica "
                       f"{topic_name}-0 with broker 1"]  # back where it is: the copy stops
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and list(Path(source).glob("*-future")):
            time.sleep(0.1)
        assert not list(Path(source).glob("*-future"))  # the copy is gone
        out = cli.lines("topic", "reassign", "verify", "--reassignment-json-file", str(plan))
        assert out[-1] == (f"Partition {topic_name}-0 on broker 1 is not being moved from log "
                           f"dir {target} to {source}.")  # fmt: skip
        got = [m.value() for m in consume_all(broker.bootstrap, topic_name, [0], len(sent))]
        assert got == sent
