"""Start and stop a real strom broker process (see :mod:`strom.testing`)."""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

from strom.config import parse_properties

#: ``LOW-HIGH`` (inclusive): :func:`free_port` hands out ports of this range only. strom's test
#: suite gives each pytest-xdist worker a range of its own (``tests/conftest.py``).
PORT_RANGE_ENV = "STROM_TEST_PORTS"


def port_range() -> tuple[int, int] | None:
    """The ``(low, high)`` range named by ``$STROM_TEST_PORTS``, or None when it is unset."""
    value = os.environ.get(PORT_RANGE_ENV, "").strip()
    if not value:
        return None
    low, sep, high = value.partition("-")
    try:
        lo, hi = int(low), int(high)
    except ValueError:
        lo = hi = 0
    if not sep or not 1024 <= lo <= hi <= 65535:
        raise ValueError(f"{PORT_RANGE_ENV}={value!r}: want LOW-HIGH within 1024-65535")
    return lo, hi


def properties_file(path: Path, props: Mapping[str, str]) -> Path:
    """Write ``props`` to ``path`` as a Java properties file (``key=value`` lines, the values as
    given: no escaping), the shape ``strom serve --config`` and Connect's worker read; ``path``."""
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that was free a moment ago.

    Without ``$STROM_TEST_PORTS`` the kernel picks one (bind to port 0). The kernel picks from
    the ephemeral range, where every outgoing connection also takes its source port, so a port
    given out here may be taken by a client's connection before the server binds it; and two
    processes asking at once may be given the same one. With ``STROM_TEST_PORTS=LOW-HIGH``
    (keep it below ``/proc/sys/net/ipv4/ip_local_port_range``, where no outgoing connection
    goes) ports are handed out in turn from that range, the next one to try kept in a file
    locked while it is read and written, so every process that shares the range (a test and
    the ``strom cluster up`` it runs) gets a port nobody else was given recently; a port that
    does not bind (still in use) is skipped.
    """
    span = port_range()
    if span is None:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            return int(sock.getsockname()[1])
    return _next_port_in(span, host)


def _next_port_in(span: tuple[int, int], host: str) -> int:
    lo, hi = span
    size = hi - lo + 1
    state = Path(tempfile.gettempdir()) / f"strom-test-ports-{lo}-{hi}"
    with open(state, "a+b") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # released when the file closes
        f.seek(0)
        try:
            offset = int(f.read() or b"0") % size
        except ValueError:
            offset = 0
        for step in range(size):
            port = lo + (offset + step) % size
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                try:
                    sock.bind((host, port))
                except OSError:
                    continue
            f.seek(0)
            f.truncate()
            f.write(str((offset + step + 1) % size).encode())
            return port
    raise OSError(f"no free port on {host} in {PORT_RANGE_ENV}={lo}-{hi}")


def wait_for_port(host: str, port: int, timeout: float) -> bool:
    """True once ``host:port`` accepts a TCP connection, False after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)
    return False


def wait_stopped(pid: int, timeout: float = 10.0) -> None:
    """Wait until every thread of ``pid`` is in the stopped state (``T`` in
    ``/proc/<pid>/task/<tid>/stat``) after a SIGSTOP; RuntimeError after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        states = []
        try:
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/stat", encoding="ascii", errors="replace") as f:
                    states.append(f.read().rpartition(")")[2].split()[0])
        except FileNotFoundError:  # exited, or a thread ended while we looked
            if not os.path.exists(f"/proc/{pid}"):
                return
            continue
        if states and all(s in ("T", "t") for s in states):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"process {pid} did not stop after SIGSTOP: thread states {states}")
        time.sleep(0.005)


class ChildProcess:
    """A strom command run as a child process that listens on ``self.host``:``self.port``.

    Subclasses say what to run (:meth:`command`) and prepare files (:meth:`prepare`); this class
    starts it with its output in ``self.log_file``, waits until the port accepts connections,
    and stops it by its PID (SIGTERM, then SIGKILL after a timeout; or SIGKILL at once).
    :meth:`pause` / :meth:`resume` send SIGSTOP / SIGCONT; stopping a paused process resumes it
    first, so its SIGTERM handler can run.
    """

    name = "strom"
    host = "127.0.0.1"
    #: Start in a session of its own, so it outlives the starter's terminal (``cluster up``).
    detach = False
    port: int
    log_file: Path
    #: environment variables set for the child on top of this process's own (subclasses
    #: set their own dict in ``__init__``; never mutated here)
    env: dict[str, str] = {}  # noqa: RUF012 - read-only default
    _proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def command(self) -> list[str]:
        raise NotImplementedError

    def prepare(self) -> None:
        """Create what the command needs before it starts (directories, property files)."""

    def environment(self) -> dict[str, str]:
        """Variables added to the child's environment (this process's own, inherited)."""
        return {}

    def start(self, timeout: float = 30.0) -> Self:
        if self._proc is not None and self._proc.poll() is None:
            raise RuntimeError(f"{self.name} already running")
        self.prepare()
        log = open(self.log_file, "ab")  # noqa: SIM115 - the child owns it until it exits
        try:
            self._proc = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.env, **self.environment()},
                start_new_session=self.detach,
            )
        finally:
            log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with {self._proc.returncode}:\n{self.log_tail()}"
                )
            if wait_for_port(self.host, self.port, 0.2):
                return self
        self.kill()
        raise RuntimeError(f"{self.name} did not listen within {timeout}s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def wait(self, timeout: float) -> int | None:
        """Wait for the process to exit by itself; its exit code (None if still running)."""
        proc = self._proc
        if proc is None:
            return None
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        self._proc = None
        return code

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM (a clean shutdown), then SIGKILL if it has not exited within ``timeout``."""
        return self._signal_and_wait(signal.SIGTERM, timeout)

    def kill(self) -> int | None:
        """SIGKILL: the crash a durability test wants."""
        return self._signal_and_wait(signal.SIGKILL, 10.0)

    def pause(self) -> None:
        """SIGSTOP: the process stops answering; its connections stay open. Returns once every
        thread of it has stopped: the signal is delivered to each thread as it is next
        scheduled, and a thread running at that moment on a loaded machine could still
        answer one more request (a test that checks the pause landed saw an answer)."""
        if self._proc is not None and self._proc.poll() is None:
            os.kill(self._proc.pid, signal.SIGSTOP)
            wait_stopped(self._proc.pid)

    def resume(self) -> None:
        """SIGCONT after :meth:`pause`."""
        if self._proc is not None and self._proc.poll() is None:
            os.kill(self._proc.pid, signal.SIGCONT)

    def _signal_and_wait(self, sig: int, timeout: float) -> int | None:
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            os.kill(proc.pid, sig)
            if sig != signal.SIGKILL:
                os.kill(proc.pid, signal.SIGCONT)  # a paused process handles it once resumed
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(10)
        self._proc = None
        return proc.returncode

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class BrokerProcess(ChildProcess):
    """One ``strom serve`` child process bound to ``host`` (127.0.0.1) on a free port.

    The data directory survives :meth:`stop` and :meth:`kill`, so :meth:`start` again is a
    restart on the same data (what a kill -9 test needs). For a cluster member give
    ``broker_id`` and ``zookeeper`` (the ``broker.id`` and ``zookeeper.connect`` properties)
    and a ``host`` of its own (127.0.0.2, …) so network faults can tell brokers apart.

    With a ``listeners`` setting or a ``config_file`` that has one (named listeners, :mod:`strom.security.listeners`) no
    ``--listen`` is given: ``port`` must then be one of those listeners' ports (the one
    :attr:`bootstrap` names and start-up waits for).

    The admin listener (``/metrics``, ``/health/*``) is off unless ``admin_port`` is given
    (``admin=True`` picks a free port): two test brokers on the default 9644 would clash.
    ``env``: environment variables of the broker on top of this process's (e.g. a disk-fault
    injector's, :mod:`strom.testing.diskfault`).
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        port: int | None = None,
        settings: Mapping[str, str] | None = None,
        extra_args: Sequence[str] = (),
        log_file: Path | None = None,
        admin: bool = False,
        admin_port: int | None = None,
        host: str = "127.0.0.1",
        broker_id: int | None = None,
        zookeeper: str | None = None,
        env: Mapping[str, str] | None = None,
        config_file: Path | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.env = dict(env or {})
        #: a server.properties given with ``--config``
        self.config_file = config_file
        self.host = host
        self.port = port or free_port(host)
        self.admin_port = admin_port or (free_port() if admin else None)
        self.settings = dict(settings or {})
        if broker_id is not None:
            self.settings.setdefault("broker.id", str(broker_id))
        if zookeeper is not None:
            self.settings.setdefault("zookeeper.connect", zookeeper)
        self.broker_id = broker_id
        self.extra_args = list(extra_args)
        self.log_file = log_file or self.data_dir.parent / f"broker-{self.port}.log"
        self._proc = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def admin_url(self) -> str:
        """``http://127.0.0.1:PORT`` of the admin listener (ValueError when it is off)."""
        if self.admin_port is None:
            raise ValueError("this broker was started without an admin listener")
        return f"http://127.0.0.1:{self.admin_port}"

    def command(self) -> list[str]:
        cmd = [
            sys.executable,
            "-m",
            "strom",
            "serve",
            "--data-dir",
            str(self.data_dir),
        ]
        if self.config_file is not None:
            cmd += ["--config", str(self.config_file)]
        if not self._named_listeners():  # else ``port`` is one of the named listeners'
            cmd += ["--listen", self.bootstrap]
        if "strom.admin.listener" not in self.settings:
            admin = "" if self.admin_port is None else f"127.0.0.1:{self.admin_port}"
            cmd.append(f"--admin-listener={admin}")
        for key, value in self.settings.items():
            cmd += ["--set", f"{key}={value}"]
        return cmd + self.extra_args

    def _named_listeners(self) -> bool:
        """Whether the settings or the config file give ``listeners``."""
        if "listeners" in self.settings:
            return True
        if self.config_file is None:
            return False

        return "listeners" in parse_properties(self.config_file.read_text())

    def prepare(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
