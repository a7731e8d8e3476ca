"""``strom serve`` as a new user first runs it (issue 21): with the default admin listener
127.0.0.1:9644 busy the broker starts anyway, without the listener, and says so in one
WARNING naming ``--admin-listener`` (asked for explicitly, a busy port fails start-up in one
line with the hint, as before); a brand-new data dir is not reported as an unclean shutdown,
nor with a broker epoch that reads like a count of restarts."""

from __future__ import annotations

import contextlib
import errno
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from strom.testing import free_port, wait_for_port
from tests.integration.cli_helpers import Cli, strom

DEFAULT = ("127.0.0.1", 9644)


@contextlib.contextmanager
def held(address: tuple[str, int]) -> Iterator[None]:
    """``address`` busy for the duration: bound here, or already taken by someone else."""
    sock = socket.socket()
    try:
        sock.bind(address)
        sock.listen(1)
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
    try:
        yield
    finally:
        sock.close()


def test_a_busy_default_admin_port_does_not_stop_the_broker(tmp_path: Path) -> None:
    # as a user runs it: no --admin-listener, so the default 127.0.0.1:9644 applies
    port = free_port()
    bootstrap = f"127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "strom", "serve", "--data-dir", str(tmp_path / "data"),
           "--listen", bootstrap]  # fmt: skip
    log = tmp_path / "serve.log"
    with held(DEFAULT), log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        try:
            assert wait_for_port("127.0.0.1", port, 60), log.read_text()
            cli = Cli(bootstrap)
            cli.ok("topic", "create", "still-served", "-p", "1")
            assert cli.lines("topic", "list") == ["still-served"]
        finally:
            proc.terminate()
            assert proc.wait(30) == 0
    text = log.read_text()
    warnings = [line for line in text.splitlines() if "WARNING" in line]
    assert len(warnings) == 1, text
    assert "admin listener off" in warnings[0] and "--admin-listener" in warnings[0], warnings
    assert "127.0.0.1:9644" in warnings[0] and "Traceback" not in text


@pytest.mark.parametrize("how", [["--admin-listener", "127.0.0.1:{port}"],
                                 ["--set", "strom.admin.listener=127.0.0.1:{port}"]])
def test_a_busy_admin_port_asked_for_fails_with_the_hint(tmp_path: Path, how: list[str]) -> None:
    port = free_port()
    args = [a.format(port=port) for a in how]
    with held(("127.0.0.1", port)):
        proc = strom("serve", "--data-dir", str(tmp_path / "data"), "--listen",
                     f"127.0.0.1:{free_port()}", *args, timeout=60)  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == (
        f"strom serve: cannot listen on strom.admin.listener 127.0.0.1:{port}: Address already "
        "in use (choose another with --admin-listener HOST:PORT, or turn it off with "
        "--admin-listener=)\n"
    )


def test_a_brand_new_data_dir_says_nothing_of_a_last_shutdown(tmp_path: Path) -> None:
    from strom.testing import BrokerProcess

    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    try:
        assert Cli(broker.bootstrap).lines("topic", "list") == []
    finally:
        assert broker.stop() == 0
    first = broker.log_file.read_text()
    assert "loaded 0 logs" in first and "last shutdown" not in first, first
    assert "registered broker 1 at" in first and "broker epoch" not in first, first
    assert "WARNING" not in first and "Traceback" not in first, first
