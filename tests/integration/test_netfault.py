"""nftables faults for real: traffic between two loopback addresses passes, is dropped while
the fault holds (counted by the rules), and passes again once healed; the table is removed."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from strom.testing import netfault
from strom.testing.netfault import Endpoint, NetworkFault

REASON = netfault.available()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")

A, B, C = "127.0.0.2", "127.0.0.3", "127.0.0.4"


def tables() -> set[str]:
    out = subprocess.run(
        [str(netfault.nft_path()), "-j", "list", "tables"], capture_output=True, text=True
    ).stdout
    return {i["table"]["name"] for i in json.loads(out)["nftables"] if "table" in i}


@pytest.fixture
def server() -> Iterator[socket.socket]:
    """A listening socket on B (a free port)."""
    sock = socket.socket()
    sock.bind((B, 0))
    sock.listen(8)
    sock.settimeout(5)
    try:
        yield sock
    finally:
        sock.close()


def connect_from(host: str, server: socket.socket, timeout: float = 1.0) -> socket.socket:
    client = socket.socket()
    client.settimeout(timeout)
    client.bind((host, 0))  # as brokers bind their outgoing connections to their own address
    client.connect(server.getsockname())
    return client


def round_trip(host: str, server: socket.socket) -> None:
    """Connect from ``host``, send a line each way; raises on any failure."""
    with connect_from(host, server) as client:
        conn, peer = server.accept()
        with conn:
            assert peer[0] == host
            client.sendall(b"ping")
            assert conn.recv(4) == b"ping"
            conn.sendall(b"pong")
            assert client.recv(4) == b"pong"


def test_drop_both_directions_then_heal(server: socket.socket) -> None:
    port = server.getsockname()[1]
    round_trip(A, server)  # passes before the fault
    # an established connection, to see both directions dropped once the fault strikes
    client = connect_from(A, server)
    conn, _ = server.accept()
    conn.settimeout(1.0)
    with NetworkFault() as fault, client, conn:
        assert fault.name in tables()
        fault.drop(Endpoint(A), Endpoint(B, port))
        # new connections time out (the SYN vanishes on arrival; the client sees no error)
        with pytest.raises((TimeoutError, socket.timeout)):
            connect_from(A, server)
        # data on the established connection does not arrive, either way
        client.sendall(b"lost?")
        with pytest.raises((TimeoutError, socket.timeout)):
            conn.recv(5)
        conn.sendall(b"back?")
        with pytest.raises((TimeoutError, socket.timeout)):
            client.recv(5)
        # other addresses are not cut
        round_trip(C, server)
        counts = fault.counters()
        assert counts[f"{A}:* > {B}:{port}"] > 0, counts
        assert counts[f"{B}:{port} > {A}:*"] > 0, counts
        during = fault.dropped()
        fault.heal()
        assert fault.counters() == {}
        assert fault.dropped() == during  # healed drops still count
        round_trip(A, server)  # passes again
        # the established connection recovers: TCP retransmits what was dropped (its backoff
        # doubles while the cut lasts: the next try may be seconds away)
        conn.settimeout(30.0)
        assert conn.recv(5) == b"lost?"
    assert fault.name not in tables()


def test_stale_tables_of_dead_processes_are_removed_others_kept() -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = f"{netfault.TABLE_PREFIX}{dead.pid}_1"
    alive = f"{netfault.TABLE_PREFIX}{os.getpid()}_999999"
    for name in (stale, alive):
        subprocess.run([str(netfault.nft_path()), "add", "table", "inet", name], check=True)
    try:
        with NetworkFault() as fault:  # start() cleans up stale tables first
            names = tables()
            assert stale not in names
            assert alive in names and fault.name in names
    finally:
        for name in (stale, alive):
            subprocess.run([str(netfault.nft_path()), "delete", "table", "inet", name],
                           capture_output=True)  # fmt: skip


def test_table_removed_at_exit_of_a_process_that_forgot_to_close() -> None:
    code = (
        "from strom.testing.netfault import NetworkFault, Endpoint\n"
        "f = NetworkFault().start()\n"
        "f.drop(Endpoint('127.0.0.2'), Endpoint('127.0.0.3', 1))\n"
        "print(f.name, flush=True)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=30, env=dict(os.environ))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    name = proc.stdout.strip()
    assert name.startswith(netfault.TABLE_PREFIX)
    deadline = time.monotonic() + 5
    while name in tables() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert name not in tables()
