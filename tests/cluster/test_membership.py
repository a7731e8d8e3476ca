"""Cluster membership on a real ZooKeeper: brokers register, see each other's registrations and
topics, a killed broker's registration goes with its session, ids and cluster ids are checked.

Partition leadership is not tested here (the controller's part): only the registrations, the
topic registry every broker keeps from ZooKeeper's watches, and the dynamic broker configs (a
password one encrypted in its ZooKeeper node with the brokers' password.encoder.secret).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)
from kazoo.client import KazooClient

from strom.broker.password_encoder import PasswordEncoder
from strom.metadata.topics import uuid_from_kafka
from strom.metadata.zk_model import BrokerRegistration
from strom.testing import BrokerProcess
from strom.testing.zookeeper import ZooKeeperProcess, zookeeper_available

pytestmark = pytest.mark.skipif(not zookeeper_available(), reason="apt-get install -y zookeeper")
SESSION_MS = 3000
ENCODER_SECRET = "cluster-encoder-secret-5d1e"
DYNAMIC_BROKER_CONFIG = ConfigSource.DYNAMIC_BROKER_CONFIG


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperProcess]:
    with ZooKeeperProcess(tmp_path_factory.mktemp("zk")) as zk:
        yield zk


@pytest.fixture
def chroot(zookeeper: ZooKeeperProcess) -> str:
    return f"/strom-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def zk_client(zookeeper: ZooKeeperProcess, chroot: str) -> Iterator[KazooClient]:
    client = KazooClient(hosts=f"{zookeeper.connect_string}{chroot}", timeout=10)
    client.start(10)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def member(tmp_path: Path, zk: ZooKeeperProcess, chroot: str, broker_id: int,
           data: str | None = None, session_ms: int = SESSION_MS) -> BrokerProcess:  # fmt: skip
    return BrokerProcess(
        tmp_path / (data or f"b{broker_id}") / "data",
        settings={"zookeeper.session.timeout.ms": str(session_ms), "broker.rack": f"r{broker_id}",
                  "password.encoder.secret": ENCODER_SECRET},
        extra_args=["--zookeeper", f"{zk.connect_string}{chroot}", "--broker-id", str(broker_id)],
    )


def wait_until(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.1)


def registered(zk: KazooClient) -> dict[int, tuple[BrokerRegistration, int]]:
    out = {}
    for name in zk.get_children("/brokers/ids") if zk.exists("/brokers/ids") else []:
        try:
            data, stat = zk.get(f"/brokers/ids/{name}")
        except Exception:
            continue
        out[int(name)] = (BrokerRegistration.from_json(int(name), data), stat.czxid)
    return out


@pytest.mark.slow
def test_brokers_register_see_each_other_and_a_killed_one_goes(
    tmp_path: Path, zookeeper: ZooKeeperProcess, chroot: str, zk_client: KazooClient
) -> None:
    one, two = member(tmp_path, zookeeper, chroot, 1), member(tmp_path, zookeeper, chroot, 2)
    with ThreadPoolExecutor(2) as pool:  # at once: both race to create the internal topics
        started = [pool.submit(one.start), pool.submit(two.start)]
    try:
        for fut in started:
            fut.result()
        brokers = wait_until(lambda: len(registered(zk_client)) == 2 and registered(zk_client),
                             30, "two registrations")  # fmt: skip
        for broker_id, proc in ((1, one), (2, two)):
            reg, epoch = brokers[broker_id]
            assert (reg.host, reg.port, reg.rack) == ("127.0.0.1", proc.port, f"r{broker_id}")
            assert epoch > 0
            owner = zk_client.exists(f"/brokers/ids/{broker_id}").ephemeralOwner
            assert owner != 0
        cluster = json.loads(zk_client.get("/cluster/id")[0])["id"]
        for proc in (one, two):
            props = (proc.data_dir / "meta.properties").read_text()
            assert f"cluster.id={cluster}\n" in props

        # a topic created through broker 1 is in broker 2's registry (watch-driven)
        admin1 = AdminClient({"bootstrap.servers": one.bootstrap})
        admin1.create_topics([NewTopic("shared", 3, 1, config={"retention.ms": "12345"})])[
            "shared"
        ].result(30)
        doc = json.loads(zk_client.get("/brokers/topics/shared")[0])
        assert doc["version"] == 3 and sorted(doc["partitions"]) == ["0", "1", "2"]
        assert len(doc["topic_id"]) == 22 and uuid_from_kafka(doc["topic_id"]).version == 4
        assert doc["adding_replicas"] == {} == doc["removing_replicas"]
        admin2 = AdminClient({"bootstrap.servers": two.bootstrap})

        def seen_by_two() -> bool:
            topics = admin2.list_topics(timeout=10).topics
            return "shared" in topics and len(topics["shared"].partitions) == 3

        wait_until(seen_by_two, 20, "broker 2 to see the topic")
        resource = ConfigResource("TOPIC", "shared")
        described = admin2.describe_configs([resource])[resource].result(30)
        assert described["retention.ms"].value == "12345"

        # the cluster-wide default, set through broker 1, applies on broker 2 (its watch)
        cli = subprocess.run([sys.executable, "-m", "strom", "-b", one.bootstrap, "cluster",
                              "config", "set", "--default", "log.retention.ms=7777"],
                             capture_output=True, text=True, timeout=60)  # fmt: skip
        assert cli.returncode == 0, cli.stderr

        def two_has_it() -> bool:
            res = ConfigResource("BROKER", "2")
            got = admin2.describe_configs([res])[res].result(30)
            return got["log.retention.ms"].value == "7777"

        wait_until(two_has_it, 20, "broker 2 to apply its dynamic config")

        # a password config of broker 2 set through broker 1: encrypted in ZooKeeper, decoded
        # by broker 2's watch (only a decoded value is in force: DYNAMIC_BROKER_CONFIG)
        password_name, password = "listener.name.ssl.ssl.key.password", "key-pässword-0b7c"
        res2 = ConfigResource("BROKER", "2", incremental_configs=[ConfigEntry(
            password_name, password, incremental_operation=AlterConfigOpType.SET)])  # fmt: skip
        admin1.incremental_alter_configs([res2])[res2].result(30)
        node = zk_client.get("/config/brokers/2")[0]
        assert password.encode() not in node and ENCODER_SECRET.encode() not in node
        stored = json.loads(node)["config"][password_name]
        assert PasswordEncoder(ENCODER_SECRET).decode(stored) == password

        def two_has_the_password() -> bool:
            res = ConfigResource("BROKER", "2")
            got = admin2.describe_configs([res])[res].result(30)
            entry = got.get(password_name)
            return entry is not None and ConfigSource(entry.source) == DYNAMIC_BROKER_CONFIG and (
                entry.value is None and entry.is_sensitive)

        wait_until(two_has_the_password, 20, "broker 2 to decode its password config")

        # kill -9: the registration outlives the process until the session times out
        old_epoch = brokers[2][1]
        killed_at = time.monotonic()
        two.kill()
        assert 2 in registered(zk_client)
        wait_until(lambda: 2 not in registered(zk_client), SESSION_MS / 1000 + 15,
                   "broker 2's registration to expire")  # fmt: skip
        assert time.monotonic() - killed_at > SESSION_MS / 1000 * 0.5
        assert 1 in registered(zk_client)

        # restarted, it registers again with a higher epoch and sees the topic
        two.start()
        again = wait_until(lambda: registered(zk_client).get(2), 30, "broker 2 back")
        assert again[1] > old_epoch
        wait_until(seen_by_two, 20, "broker 2 to see the topic after its restart")
        assert two_has_the_password()  # decoded at start-up
    finally:
        two.stop()
        one.stop()


def serve(*args: str) -> subprocess.CompletedProcess[str]:
    """``strom serve`` in the foreground, without the admin listener (its default port, 9644,
    may be taken by any other broker on the machine)."""
    return subprocess.run([sys.executable, "-m", "strom", "serve", "--admin-listener=", *args],
                          capture_output=True, text=True, timeout=90)  # fmt: skip


@pytest.mark.slow
def test_a_taken_broker_id_and_a_foreign_cluster_id_are_refused(
    tmp_path: Path, zookeeper: ZooKeeperProcess, chroot: str, zk_client: KazooClient
) -> None:
    connect = f"{zookeeper.connect_string}{chroot}"
    long_session = 8000  # longer than a restart takes: the restart below meets its old node
    with member(tmp_path, zookeeper, chroot, 1, session_ms=long_session) as one:
        wait_until(lambda: 1 in registered(zk_client), 30, "broker 1 registered")
        twin = member(tmp_path, zookeeper, chroot, 1, data="twin")
        result = serve("--data-dir", str(twin.data_dir), "--listen", twin.bootstrap,
                       "--zookeeper", connect, "--broker-id", "1")  # fmt: skip
        assert result.returncode == 1
        lines = [x for x in result.stderr.splitlines() if x.startswith("strom serve:")]
        assert lines == [
            f"strom serve: broker.id 1 is already registered at /brokers/ids/1 by another "
            f"broker (127.0.0.1:{one.port}); choose another broker.id"
        ]
        assert "Traceback" not in result.stderr
        assert registered(zk_client)[1][0].port == one.port  # the twin took nothing

        foreign = tmp_path / "foreign"
        foreign.mkdir()
        (foreign / "meta.properties").write_text("version=1\ncluster.id=someOtherCluster\n"
                                                 "node.id=3\n")  # fmt: skip
        result = serve("--data-dir", str(foreign), "--listen", twin.bootstrap,
                       "--zookeeper", connect, "--broker-id", "3")  # fmt: skip
        assert result.returncode == 1
        cluster = json.loads(zk_client.get("/cluster/id")[0])["id"]
        assert (
            f"strom serve: The Cluster ID {cluster} doesn't match stored clusterId "
            "someOtherCluster in meta.properties." in result.stderr
        )
        assert "Traceback" not in result.stderr and 3 not in registered(zk_client)

        # kill -9 and restart at once: the new run waits out its old session, then registers
        old = registered(zk_client)[1]
        one.kill()
        restarted_at = time.monotonic()
        one.start()
        new = wait_until(lambda: (r := registered(zk_client).get(1)) and r[1] != old[1] and r,
                         long_session / 1000 + 30, "broker 1 registered again")  # fmt: skip
        assert new[1] > old[1] and new[0].port == one.port
        assert time.monotonic() - restarted_at > long_session / 1000 * 0.5
        assert "waiting for the session of a previous run" in one.log_file.read_text()
