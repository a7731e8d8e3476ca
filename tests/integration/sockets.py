"""The broker's side of a test's TCP connection, seen through /proc/net/tcp (Linux).

Lets a test wait for a socket *state* instead of sleeping: "the broker has read my request"
(its receive queue is empty) or "the broker is stalled writing to me" (its send queue is not).
"""

from __future__ import annotations

import socket
import time
from pathlib import Path


def broker_side_queues(conn: socket.socket) -> tuple[int, int] | None:
    """(send queue, receive queue) in bytes of the broker's end of ``conn``, or None."""
    local_port = conn.getsockname()[1]
    broker_port = conn.getpeername()[1]
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, remote, queues = fields[1], fields[2], fields[4]
            if int(local.rsplit(":", 1)[1], 16) == broker_port and int(
                remote.rsplit(":", 1)[1], 16
            ) == local_port:
                tx, rx = queues.split(":")
                return int(tx, 16), int(rx, 16)
    return None


def wait_until(check, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def wait_request_read(conn: socket.socket, timeout: float = 10.0) -> None:
    """Until the broker has read everything sent on ``conn`` (its receive queue is empty)."""
    wait_until(lambda: (q := broker_side_queues(conn)) is not None and q[1] == 0, timeout,
               "the broker to read the request")  # fmt: skip


def wait_broker_stalled_writing(conn: socket.socket, timeout: float = 10.0) -> None:
    """Until the broker has bytes for ``conn`` that the client has not made room for."""
    wait_until(lambda: (q := broker_side_queues(conn)) is not None and q[0] > 0, timeout,
               "the broker to fill the socket buffers")  # fmt: skip
