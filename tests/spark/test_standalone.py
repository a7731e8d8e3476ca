"""An example pipeline, unchanged, on a Spark standalone master and worker (not local[*]).

Master and worker are started from the pyspark installation (``spark-class``), bound to
127.0.0.1 on free ports, and stopped by PID. The example runs as its own command
(``python examples/log_aggregation.py --master spark://...``), as a user would run it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from strom.testing import BrokerProcess, free_port, wait_for_port

from .helpers import wait_for

ROOT = Path(__file__).resolve().parents[2]


def _spark_class() -> str:
    import pyspark  # noqa: PLC0415

    return str(Path(pyspark.__file__).parent / "bin" / "spark-class")


def _start(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(
            [_spark_class(), *args], stdout=out, stderr=subprocess.STDOUT, env=env
        )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[str]:
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", SPARK_LOG_DIR=str(tmp_path),
               PYSPARK_PYTHON=sys.executable)  # fmt: skip
    port, ui = free_port(), free_port()
    master = _start(
        ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
         "--webui-port", str(ui)],
        tmp_path / "master.log", env,
    )  # fmt: skip
    worker = None
    try:
        assert wait_for_port("127.0.0.1", port, 120), (tmp_path / "master.log").read_text()
        url = f"spark://127.0.0.1:{port}"
        worker = _start(
            ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
             "--port", str(free_port()), "--webui-port", str(free_port()), "--cores", "2",
             "--memory", "2g", "--work-dir", str(tmp_path / "work"), url],
            tmp_path / "worker.log", env,
        )  # fmt: skip

        def registered() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=5) as r:
                    return int(json.load(r).get("aliveworkers", 0)) >= 1
            except OSError:
                return False

        wait_for(registered, 120, "the worker to register with the master")
        yield url
    finally:
        if worker is not None:
            _stop(worker)
        _stop(master)


@pytest.mark.slow
def test_example_on_a_standalone_cluster(
    standalone: str, spark_broker: BrokerProcess, tmp_path: Path
) -> None:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "log_aggregation.py"),
         "--bootstrap", spark_broker.bootstrap, "--master", standalone],
        capture_output=True, timeout=540, env=env, cwd=tmp_path,
    )  # fmt: skip
    lines = done.stdout.decode().strip().splitlines()
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    report = json.loads(lines[-1])
    assert report["ok"] is True and report["results"] == report["expected"] > 10
