"""Start and stop a real ZooKeeper server from Debian's ``zookeeper`` package.

Debian's ``/usr/share/zookeeper/bin/zkServer.sh`` runs
``java -cp /etc/zookeeper/conf:/usr/share/java/zookeeper.jar
org.apache.zookeeper.server.quorum.QuorumPeerMain <zoo.cfg>``; the jar's manifest names every
other jar it needs (netty, jute, slf4j …), and the conf directory only supplies
``log4j.properties``. :class:`ZooKeeperProcess` does the same with a config of its own::

    dataDir=<dir>/data            clientPort=<free port>      clientPortAddress=127.0.0.1
    tickTime=100                  maxSessionTimeout=60000     admin.enableServer=false
    4lw.commands.whitelist=ruok,srvr,stat,mntr,cons          maxClientCnxns=0

``tickTime`` is small so tests may use short session timeouts (ZooKeeper grants between two and
twenty ticks unless told otherwise: ``maxSessionTimeout`` lets Kafka's default 18 s through).
It is ready once ``srvr`` reports its mode (``ruok`` says ``imok`` earlier). :meth:`pause` / :meth:`resume` send SIGSTOP /
SIGCONT (a ZooKeeper that stops answering: every session expires once it is resumed past its
timeout). The data directory survives :meth:`stop`, so :meth:`start` again is a restart::

    with ZooKeeperProcess(tmp_path / "zk") as zk:
        store = ZooKeeperStore(zk.connect_string + "/strom")
"""

from __future__ import annotations

import shutil
import socket
import time
from pathlib import Path
from typing import Self

from strom.testing.process import ChildProcess, free_port

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
ZOOKEEPER_CONF_DIR = Path("/etc/zookeeper/conf")
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
# The jar's manifest binds slf4j to nothing: these make its log4j.properties apply (if present).
LOG_JARS = (Path("/usr/share/java/slf4j-log4j12.jar"), Path("/usr/share/java/log4j-1.2.jar"))


def zookeeper_available() -> bool:
    """True if Debian's ``zookeeper`` package and a ``java`` are installed."""
    return ZOOKEEPER_JAR.exists() and shutil.which("java") is not None


def four_letter_word(host: str, port: int, word: str, timeout: float = 2.0) -> str:
    """Send one of ZooKeeper's four-letter commands (``ruok``, ``srvr`` …); its answer."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(word.encode())
        chunks = []
        while True:
            chunk = sock.recv(4096)
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


class ZooKeeperProcess(ChildProcess):
    """One standalone ZooKeeper server on ``host`` (127.0.0.1) and a free port."""

    name = "zookeeper"

    def __init__(
        self,
        work_dir: Path,
        *,
        port: int | None = None,
        host: str = "127.0.0.1",
        tick_ms: int = 100,
        max_session_timeout_ms: int = 60_000,
        heap_mb: int = 256,
    ) -> None:
        self.work_dir = Path(work_dir)
        self.host = host
        self.port = port or free_port()
        self.tick_ms = tick_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.heap_mb = heap_mb
        self.log_file = self.work_dir / "zookeeper.log"
        self.config_file = self.work_dir / "zoo.cfg"
        self._proc = None

    @property
    def connect_string(self) -> str:
        """``host:port``, what ``zookeeper.connect`` takes (add a chroot as ``/path``)."""
        return f"{self.host}:{self.port}"

    def prepare(self) -> None:
        if not zookeeper_available():
            raise RuntimeError(
                f"ZooKeeper is not installed ({ZOOKEEPER_JAR} or java missing): "
                "apt-get install -y zookeeper"
            )
        data = self.work_dir / "data"
        data.mkdir(parents=True, exist_ok=True)
        self.config_file.write_text(
            f"dataDir={data}\n"
            f"clientPort={self.port}\n"
            f"clientPortAddress={self.host}\n"
            f"tickTime={self.tick_ms}\n"
            f"maxSessionTimeout={self.max_session_timeout_ms}\n"
            "initLimit=10\nsyncLimit=5\n"
            "maxClientCnxns=0\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=ruok,srvr,stat,mntr,cons\n"
        )

    def command(self) -> list[str]:
        logging_jars = list(LOG_JARS) if all(j.exists() for j in LOG_JARS) else []
        return [
            shutil.which("java") or "java",
            f"-Xmx{self.heap_mb}m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",  # starts faster; a test ZooKeeper needs no C2
            "-Dzookeeper.root.logger=INFO,CONSOLE",
            f"-Dzookeeper.log.dir={self.work_dir}",
            "-Dzookeeper.jmx.log4j.disable=true",
            "-cp",
            ":".join(map(str, [ZOOKEEPER_CONF_DIR, ZOOKEEPER_JAR, *logging_jars])),
            MAIN_CLASS,
            str(self.config_file),
        ]

    def start(self, timeout: float = 60.0) -> Self:
        super().start(timeout)  # the port accepts connections: the JVM is up
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:  # ``ruok`` says imok before the server serves: ``srvr`` knows its mode
                if "Mode:" in four_letter_word(self.host, self.port, "srvr"):
                    return self
            except OSError:
                pass
            time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"zookeeper did not answer ruok within {timeout}s:\n{self.log_tail()}")

    def stop(self, timeout: float = 15.0) -> int | None:
        self.resume()  # a stopped process cannot handle SIGTERM
        return super().stop(timeout)
