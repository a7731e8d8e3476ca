"""Start and stop a real ``strom connect`` worker process, and talk REST to it.

:class:`ConnectWorkerProcess` writes the worker properties (REST listener on a free
127.0.0.1 port, offsets file in its own directory), starts the worker with the given
connector files, waits for the REST API, and stops it by its PID (SIGTERM, or SIGKILL for a
crash test). :meth:`request` returns ``(status, parsed JSON body or None)``.
With ``distributed=True`` it runs ``strom connect distributed`` instead: group
``connect-cluster``, the three storage topics ``connect-configs``/``-offsets``/``-status``
with replication factor 1, and the group timings short enough for tests (all overridable
through ``settings``).

``scheme="https"`` serves the REST API over TLS (the test gives the ``listeners.https.ssl.*``
settings in ``settings`` and a client context as ``client_ssl``); ``env`` adds to the
worker's environment (``KAFKA_OPTS`` naming a JAAS file); :meth:`request` sends basic
credentials when given ``auth=(user, password)``.
"""

from __future__ import annotations

import base64
import json
import ssl
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from strom.testing.process import ChildProcess, free_port

DISTRIBUTED_DEFAULTS = {
    "group.id": "connect-cluster",
    "config.storage.topic": "connect-configs",
    "offset.storage.topic": "connect-offsets",
    "status.storage.topic": "connect-status",
    "config.storage.replication.factor": "1",
    "offset.storage.replication.factor": "1",
    "status.storage.replication.factor": "1",
    "offset.storage.partitions": "5",
    "status.storage.partitions": "2",
    "heartbeat.interval.ms": "500",
    "session.timeout.ms": "6000",
    "rebalance.timeout.ms": "20000",
    "scheduled.rebalance.max.delay.ms": "2000",
}


class ConnectWorkerProcess(ChildProcess):
    name = "strom connect worker"

    def __init__(self, work_dir: Path, bootstrap: str, *,
                 connector_files: Sequence[Path] = (),
                 settings: Mapping[str, str] | None = None,
                 distributed: bool = False, scheme: str = "http",
                 client_ssl: ssl.SSLContext | None = None,
                 env: Mapping[str, str] | None = None) -> None:
        self.scheme = scheme
        self.client_ssl = client_ssl
        self.env = dict(env or {})
        self.work_dir = Path(work_dir)
        self.distributed = distributed
        self.port = free_port()
        self.connector_files = list(connector_files)
        self.worker_file = self.work_dir / (f"worker-{self.port}.properties" if distributed
                                            else "worker.properties")
        self.offsets_file = self.work_dir / "connect.offsets"
        self.log_file = self.work_dir / f"worker-{self.port}.log"
        self.settings = {
            "bootstrap.servers": bootstrap,
            "listeners": f"{scheme}://127.0.0.1:{self.port}",
            "offset.storage.file.filename": str(self.offsets_file),
            "offset.flush.interval.ms": "500",
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "value.converter": "org.apache.kafka.connect.storage.StringConverter",
        }
        if distributed:
            del self.settings["offset.storage.file.filename"]
            self.settings.update(DISTRIBUTED_DEFAULTS)
        self.settings.update(settings or {})
        self._proc = None

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def prepare(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.worker_file.write_text("".join(f"{k}={v}\n" for k, v in self.settings.items()))

    def command(self) -> list[str]:
        if self.distributed:
            return [sys.executable, "-m", "strom", "connect", "distributed",
                    str(self.worker_file)]
        return [sys.executable, "-m", "strom", "connect", "standalone", str(self.worker_file),
                *map(str, self.connector_files)]

    @property
    def worker_id(self) -> str:
        """The id this worker writes in statuses (its advertised host:port)."""
        return f"127.0.0.1:{self.port}"

    def environment(self) -> dict[str, str]:
        return self.env

    def request(self, method: str, path: str, body: Any = None, *,
                auth: tuple[str, str] | None = None) -> tuple[int, Any]:
        """``(status, body)``: the body parsed as JSON, or as text when it is not JSON."""
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"}
        if auth is not None:
            token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
            headers["Authorization"] = f"Basic {token}"
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=30, context=self.client_ssl) as resp:
                raw, status = resp.read(), resp.status
        except urllib.error.HTTPError as exc:
            raw, status = exc.read(), exc.code
        if not raw:
            return status, None
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode("utf-8", errors="replace")

    def stop(self, timeout: float = 20.0) -> int | None:
        return super().stop(timeout)
