"""Start and stop a real ``strom connect standalone`` worker process, and talk REST to it.

:class:`ConnectWorkerProcess` writes the worker properties (REST listener on a free
127.0.0.1 port, offsets file in its own directory), starts the worker with the given
connector files, waits for the REST API, and stops it by its PID (SIGTERM, or SIGKILL for a
crash test). :meth:`request` returns ``(status, parsed JSON body or None)``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from strom.testing.process import free_port, wait_for_port


class ConnectWorkerProcess:
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
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def start(self, timeout: float = 30.0) -> ConnectWorkerProcess:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.worker_file.write_text("".join(f"{k}={v}\n" for k, v in self.settings.items()))
        cmd = [sys.executable, "-m", "strom", "connect", "standalone", str(self.worker_file),
               *map(str, self.connector_files)]
        with open(self.log_file, "ab") as log:
            self._proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                          env=dict(os.environ))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"worker exited with {self._proc.returncode}:\n"
                                   f"{self.log_tail()}")
            if wait_for_port("127.0.0.1", self.port, 0.2):
                return self
        self.kill()
        raise RuntimeError(f"worker did not listen within {timeout}s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

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
        return self._signal(signal.SIGTERM, timeout)

    def kill(self) -> int | None:
        return self._signal(signal.SIGKILL, 10.0)

    def _signal(self, sig: int, timeout: float) -> int | None:
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            os.kill(proc.pid, sig)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(10)
        self._proc = None
        return proc.returncode

    def __enter__(self) -> ConnectWorkerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
