"""``strom connect standalone``: one worker process, connectors from files and the REST API.

Worker properties are Kafka Connect's: ``bootstrap.servers``, ``offset.storage.file.filename``,
``key.converter`` / ``value.converter`` (+ their ``.schemas.enable`` etc.; these three are
required, as Kafka's), ``offset.flush.interval.ms`` (60000), ``listeners``
(``http://127.0.0.1:8083`` by default; ``https://`` and basic auth as
:mod:`strom.connect.rest_security`) or the older ``rest.host.name`` / ``rest.port``,
``producer.*`` / ``consumer.*`` client overrides. ``plugin.path`` is accepted and ignored with
a log line (Python connectors come from entry points). Connector files are Java properties or
JSON (either ``{"name", "config"}`` or a flat config object), as Kafka 3.7+ accepts.
"""

from __future__ import annotations

import json
import logging
import signal
import threading
from pathlib import Path
from typing import Any

from strom.connect.backing import FileOffsetBackingStore, MemoryConfigBackingStore
from strom.connect.client_configs import worker_client
from strom.connect.herder import RestError, StandaloneHerder
from strom.connect.rest import build_app
from strom.connect.rest_security import rest_security
from strom.connect.worker_config import (
    WorkerConfigError,
    check_converters,
    check_listen,
    parse_properties,
    rest_address,
)
from strom.security.web_tls import serve_with

LOG = logging.getLogger("strom.connect.worker")

__all__ = ["ClusterId", "WorkerConfigError", "load_connector_file", "run_standalone"]


def load_connector_file(path: Path) -> tuple[str, dict[str, str]]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json" or text.lstrip().startswith("{"):
        doc = json.loads(text)
        config = doc.get("config", doc) if isinstance(doc, dict) else None
        if not isinstance(config, dict):
            raise WorkerConfigError(f"{path}: expected a JSON object")
        name = doc.get("name") or config.get("name")
    else:
        config = parse_properties(text)
        name = config.get("name")
    if not name:
        raise WorkerConfigError(f"{path}: connector configuration has no 'name'")
    return str(name), {str(k): str(v) for k, v in config.items()}


class ClusterId:
    """The Kafka cluster id for ``GET /``, looked up once in the background."""

    def __init__(self, client: dict[str, Any]) -> None:
        self.value: str | None = None
        self.client = client
        threading.Thread(target=self._lookup, daemon=True).start()

    def _lookup(self) -> None:
        from confluent_kafka.admin import AdminClient

        try:
            admin = AdminClient(dict(self.client))
            self.value = admin.list_topics(timeout=10).cluster_id
        except Exception as exc:  # noqa: BLE001 - stays null, as a worker without a cluster
            LOG.warning("cluster id lookup failed: %s", exc)

    def __call__(self) -> str | None:
        return self.value


def run_standalone(worker_file: Path, connector_files: list[Path]) -> int:
    import uvicorn

    worker = parse_properties(worker_file.read_text(encoding="utf-8"))
    offsets_path = worker.get("offset.storage.file.filename", "").strip()
    if not offsets_path:
        raise WorkerConfigError("Missing required configuration "
                                "\"offset.storage.file.filename\" which has no default value.")
    check_converters(worker)
    if worker.get("plugin.path"):
        LOG.warning("plugin.path is ignored: strom finds Python connectors through the "
                    "'strom.connectors' entry points")
    connectors = [load_connector_file(p) for p in connector_files]
    host, port = rest_address(worker)
    security = rest_security(worker)
    check_listen(host, port)
    worker.setdefault("bootstrap.servers", "localhost:9092")
    herder = StandaloneHerder(f"{host}:{port}", worker, FileOffsetBackingStore(offsets_path),
                              MemoryConfigBackingStore())
    for name, config in connectors:
        try:
            herder.put_config(name, config, allow_replace=False)
        except RestError as exc:
            herder.shutdown()
            raise WorkerConfigError(f"connector {name}: {exc.message}") from None
    app = build_app(herder, ClusterId(worker_client(worker)), security.basic_auth)
    server = uvicorn.Server(serve_with(
        uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False,
                       lifespan="off"), security.server_ssl))
    LOG.info("worker %s:%d started with %d connector(s)", host, port, len(connectors))
    LOG.info("%s", security.describe(host, port))
    # uvicorn re-raises the signal that stopped it once it is done serving; with these
    # handlers in place that re-raise is a no-op, so the tasks still stop cleanly below
    # (source offsets stored, sink offsets committed) and the worker exits 0.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    try:
        server.run()
    finally:
        herder.shutdown()
        LOG.info("worker stopped")
    return 0 if server.started else 1
