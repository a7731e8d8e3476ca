"""Start and stop a real ``strom connect standalone`` worker process, and talk REST to it.

:class:`ConnectWorkerProcess` writes the worker properties (REST listener on a free
127.0.0.1 port, offsets file in its own directory), starts the worker with the given
connector files, waits for the REST API, and stops it by its PID (SIGTERM, or SIGKILL for a
crash test). :meth:`request` returns ``(status, parsed JSON body or None)``.
"""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from strom.testing.process import ChildProcess, free_port


class ConnectWorkerProcess(ChildProcess):
    name = "strom connect worker"

    def __init__(self, work_dir: Path, bootstrap: str, *,
                 connector_files: Sequence[Path] = (),
                 settings: Mapping[str, str] | None = None) -> None:
        self.work_dir = Path(work_dir)
        self.port = free_port()
        self.connector_files = list(connector_files)
        self.worker_file = self.work_dir / "worker.properties"
        self.offsets_file = self.work_dir / "connect.offsets"
        self.log_file = self.work_dir / f"worker-{self.port}.log"
        self.settings = {
            "bootstrap.servers": bootstrap,
            "listeners": f"http://127.0.0.1:{self.port}",
            "offset.storage.file.filename": str(self.offsets_file),
            "offset.flush.interval.ms": "500",
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "value.converter": "org.apache.kafka.connect.storage.StringConverter",
            **(settings or {}),
        }
        self._proc = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def prepare(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.worker_file.write_text("".join(f"{k}={v}\n" for k, v in self.settings.items()))

    def command(self) -> list[str]:
        return [sys.executable, "-m", "strom", "connect", "standalone", str(self.worker_file),
                *map(str, self.connector_files)]

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                raw, status = resp.read(), resp.status
        except urllib.error.HTTPError as exc:
            raw, status = exc.read(), exc.code
        return status, (json.loads(raw) if raw else None)

    def stop(self, timeout: float = 20.0) -> int | None:
        return super().stop(timeout)
