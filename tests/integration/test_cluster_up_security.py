"""``strom cluster up --security``: a local cluster with its own CA, mTLS listeners (between
brokers too), and the client settings it prints working with the CLI."""

from __future__ import annotations

import json
import shlex
import socket
import time
from pathlib import Path

import pytest

from strom.testing import free_port
from tests.integration.cli_helpers import assert_clean_error, strom


def _zookeeper_installed() -> bool:
    try:
        from strom.testing.zookeeper import zookeeper_available
    except ImportError:
        return False
    return bool(zookeeper_available())


def _two_ports() -> int:
    """A free port whose next one is free too (broker 2 listens on base + 1), both taken from
    :func:`free_port` so that no other process of the test run (the ZooKeeper ``cluster up``
    starts) is handed them while ``$STROM_TEST_PORTS`` is set."""
    for _ in range(50):
        base, following = free_port(), free_port()
        if following == base + 1:
            return base
        try:
            with socket.create_server(("127.0.0.1", base + 1)):
                return base
        except OSError:
            continue
    raise AssertionError("no two consecutive free ports")


@pytest.mark.skipif(not _zookeeper_installed(), reason="needs the zookeeper package")
def test_secured_local_cluster(tmp_path: Path) -> None:
    data_dir = tmp_path / "cl"
    base, admin = _two_ports(), _two_ports()
    env = {"XDG_CONFIG_HOME": str(tmp_path / "config")}
    up = strom("cluster", "up", "--security", "--brokers", "2", "--base-port", str(base),
               "--admin-base-port", str(admin), "--data-dir", str(data_dir), timeout=180)
    assert up.returncode == 0, up.stderr + up.stdout
    try:
        state = json.loads((data_dir / "cluster.json").read_text())
        tls = state["tls"]
        for role in ("ca", "broker", "client_cert", "client_key", "client_properties"):
            assert Path(tls[role]).is_file(), role
        assert (Path(tls["broker"]).stat().st_mode & 0o077) == 0
        bootstrap = state["bootstrap"]
        # plaintext clients get nothing
        assert_clean_error(strom("topic", "list", "-b", bootstrap, "--timeout", "3", env=env))
        # the printed profile command, run as printed
        [try_line] = [line for line in up.stdout.splitlines() if line.startswith("Try: ")]
        made = strom(*shlex.split(try_line[len("Try: strom "):]), env=env)
        assert made.returncode == 0, made.stderr
        created = strom("topic", "create", "replicated", "-p", "1", "-r", "2", env=env)
        assert created.returncode == 0, created.stderr
        sent = strom("produce", "replicated", "--acks", "all", stdin="a\nb\nc\n", env=env)
        assert sent.returncode == 0, sent.stderr
        got = strom("consume", "replicated", "--from-beginning", "--max-messages", "3",
                    "--timeout-ms", "30000", env=env)
        assert got.stdout.splitlines() == ["a", "b", "c"], got.stderr
        # both replicas in sync: the follower fetched over the brokers' mTLS listener
        def in_sync() -> bool:
            out = strom("topic", "describe", "replicated", env=env).stdout
            return "Isr: 1,2" in out or "Isr: 2,1" in out

        deadline = time.monotonic() + 40
        while not in_sync():
            assert time.monotonic() < deadline, "the follower never joined the ISR"
            time.sleep(1)
    finally:
        down = strom("cluster", "down", "--data-dir", str(data_dir), timeout=120)
        assert down.returncode == 0, down.stderr
