"""The console's Connectors page against a real ``strom connect standalone`` worker."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from strom.console.app import build_app
from strom.console.cluster import Cluster
from strom.testing import free_port
from strom.testing.connect import ConnectWorkerProcess
from tests.console.helpers import create_topic, error, eventually, notice, rows

BASE = "http://127.0.0.1"


@pytest.fixture(scope="module")
def worker(broker: Any, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[ConnectWorkerProcess]:
    proc = ConnectWorkerProcess(tmp_path_factory.mktemp("worker"), broker.bootstrap)
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def state(worker: ConnectWorkerProcess, name: str) -> tuple[str, list[str]]:
    status, body = worker.request("GET", f"/connectors/{name}/status")
    assert status == 200, body
    return body["connector"]["state"], [t["state"] for t in body["tasks"]]


def test_status_pause_resume_restart(worker: ConnectWorkerProcess, broker: Any,
                                     tmp_path: Path, topic_name: str) -> None:
    create_topic(broker.bootstrap, topic_name)
    (tmp_path / "in.txt").write_text("a\n")
    worker.request("PUT", "/connectors/files/config", {
        "connector.class": "FileStreamSource", "topic": topic_name,
        "file": str(tmp_path / "in.txt")})
    eventually(lambda: state(worker, "files") == ("RUNNING", ["RUNNING"]), "running")
    app = build_app(Cluster(broker.bootstrap), connect_url=worker.url, sample=False)
    with TestClient(app, base_url=BASE) as client:
        page = client.get("/connectors")
        assert ">Connectors</a>" in page.text
        row = [r for r in rows(page.text, "connectors") if r[0].startswith("files")]
        assert len(row) == 1 and row[0][1] == "source" and row[0][2] == "RUNNING"
        assert "FileStreamSource" in row[0][0] and row[0][3].startswith("#0 RUNNING")

        def act(action: str, **extra: str) -> str:
            resp = client.post("/connectors/action", data={"name": "files", "action": action,
                                                           **extra})
            assert resp.status_code == 200, resp.text
            return notice(resp.text)

        assert act("pause") == "Asked to pause connector files."
        eventually(lambda: state(worker, "files") == ("PAUSED", ["PAUSED"]), "paused")
        paused = client.get("/connectors").text
        assert re.search(r'name="action" value="resume"', paused)
        assert act("resume") == "Asked to resume connector files."
        eventually(lambda: state(worker, "files") == ("RUNNING", ["RUNNING"]), "resumed")
        assert act("restart") == "Asked to restart connector files."
        assert act("restart", task="0") == "Asked to restart task 0 of connector files."
        eventually(lambda: state(worker, "files") == ("RUNNING", ["RUNNING"]), "restarted")
        missing = client.post("/connectors/action", data={"name": "nope", "action": "pause"})
        assert missing.status_code == 400 and "nope" in error(missing.text)
        assert "(HTTP 404)" in error(missing.text)


def test_unreachable_worker_is_a_readable_page(broker: Any) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    app = build_app(Cluster(broker.bootstrap), connect_url=url, sample=False)
    with TestClient(app, base_url=BASE) as client:
        resp = client.get("/connectors")
    assert resp.status_code == 400
    assert error(resp.text).startswith(f"cannot reach the Connect worker at {url}")
