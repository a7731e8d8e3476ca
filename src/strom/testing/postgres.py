"""A throw-away PostgreSQL server for tests and benchmarks (Debian package ``postgresql``).

:class:`PostgresProcess` creates a cluster with ``initdb`` in a temporary directory, runs the
``postgres`` server as a child process on a free port of 127.0.0.1 (no Unix socket outside
its own directory, trust authentication for the local user ``postgres``) and stops it by its
PID. PostgreSQL refuses to run as root: under root the binaries run as the ``postgres`` user,
which the Debian package creates. :func:`postgres_binaries` is None where PostgreSQL is not
installed, so tests can skip with a clear reason.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Self

from strom.testing.process import free_port, wait_for_port


def postgres_binaries() -> Path | None:
    """The directory holding ``initdb`` and ``postgres``, or None."""
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    found = shutil.which("initdb")
    if found:
        candidates.insert(0, str(Path(os.path.realpath(found)).parent))
    for directory in candidates:
        if (Path(directory) / "initdb").exists() and (Path(directory) / "postgres").exists():
            return Path(directory)
    return None


def _run_as() -> dict[str, Any]:
    """Popen arguments that drop root to the ``postgres`` user."""
    if os.geteuid() != 0:
        return {}
    try:
        entry = pwd.getpwnam("postgres")
    except KeyError:
        raise RuntimeError("running as root needs a 'postgres' user for PostgreSQL") from None
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


class PostgresProcess:
    def __init__(self, port: int | None = None) -> None:
        binaries = postgres_binaries()
        if binaries is None:
            raise RuntimeError("PostgreSQL is not installed (Debian package 'postgresql')")
        self.bin = binaries
        self.port = port or free_port()
        self.root = Path(tempfile.mkdtemp(prefix="strom-pg-"))
        self.data = self.root / "data"
        self.log_file = self.root / "postgres.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self._initialised = False

    @property
    def url(self) -> str:
        """A SQLAlchemy URL of the ``postgres`` database."""
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    @property
    def jdbc_url(self) -> str:
        return f"jdbc:postgresql://127.0.0.1:{self.port}/postgres?user=postgres"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def _init(self) -> None:
        drop = _run_as()
        if drop:
            os.chown(self.root, drop["user"], drop["group"])
        subprocess.run([str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres",
                        "--auth=trust", "-E", "UTF8", "--no-sync"], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **drop)
        self._initialised = True

    def start(self, timeout: float = 30.0) -> Self:
        if not self._initialised:
            self._init()
        log = open(self.log_file, "ab")  # noqa: SIM115 - the child owns it
        try:
            self._proc = subprocess.Popen(
                [str(self.bin / "postgres"), "-D", str(self.data), "-p", str(self.port),
                 "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={self.root}",
                 "-c", "fsync=off", "-c", "synchronous_commit=off",
                 "-c", "full_page_writes=off"],
                stdout=log, stderr=subprocess.STDOUT, **_run_as())
        finally:
            log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"postgres exited: {self.log_file.read_text()[-2000:]}")
            if wait_for_port("127.0.0.1", self.port, 0.2) and self._ready():
                return self
        self.stop()
        raise RuntimeError("postgres did not start in time")

    def _ready(self) -> bool:
        ready = subprocess.run([str(self.bin / "pg_isready"), "-h", "127.0.0.1", "-p",
                                str(self.port)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
        return ready.returncode == 0

    def stop(self, timeout: float = 20.0) -> None:
        """Fast shutdown (SIGINT to the postmaster's PID), SIGKILL if it lingers."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        os.kill(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()
