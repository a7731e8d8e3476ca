"""``strom connect distributed``: a worker of a Connect cluster (Kafka Connect's properties).

Required: ``group.id``, ``config.storage.topic``, ``offset.storage.topic``,
``status.storage.topic``, ``key.converter``, ``value.converter`` (as Kafka). Defaults are Kafka's: ``*.replication.factor`` 3 (-1: the
broker's default), ``offset.storage.partitions`` 25, ``status.storage.partitions`` 5 (the config
topic always has one partition), ``heartbeat.interval.ms`` 3000, ``session.timeout.ms`` 10000,
``rebalance.timeout.ms`` 60000, ``scheduled.rebalance.max.delay.ms`` 300000,
``connect.protocol`` sessioned, ``exactly.once.source.support`` disabled (``preparing``,
``enabled``: see :mod:`strom.connect.eos`). The REST listener is ``listeners`` (or ``rest.host.name`` /
``rest.port``); other workers reach it at ``rest.advertised.host.name`` /
``rest.advertised.port`` (the listener's by default), which is also the worker id in statuses.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable
from pathlib import Path

from strom.connect.client_configs import worker_client, worker_wire_security
from strom.connect.distributed import DistributedHerder
from strom.connect.eos import WORKER_MODES
from strom.connect.forward import use_tls, worker_url
from strom.connect.group_protocol import MODES
from strom.connect.membership import GroupMember
from strom.connect.rest import build_app
from strom.connect.rest_security import rest_security
from strom.connect.standalone import ClusterId
from strom.connect.topic_log import OnRecord, TopicLog, TopicLogError
from strom.connect.topic_stores import ConfigTopicStore, OffsetTopicStore, StatusTopicStore
from strom.connect.worker_config import (
    WorkerConfigError,
    check_converters,
    check_listen,
    parse_properties,
    rest_address,
)
from strom.security.web_tls import serve_with

LOG = logging.getLogger("strom.connect.worker")
REQUIRED = ("group.id", "config.storage.topic", "offset.storage.topic", "status.storage.topic")


def _int(worker: dict[str, str], key: str, default: int) -> int:
    raw = worker.get(key, "").strip()
    try:
        return int(raw) if raw else default
    except ValueError:
        raise WorkerConfigError(f"Invalid value {raw} for configuration {key}: Not a number "
                                f"of type INT") from None


def build_herder(worker: dict[str, str]) -> tuple[DistributedHerder, str, int]:
    """The herder for these worker properties, and the REST host and port to listen on."""
    for key in REQUIRED:
        if not worker.get(key, "").strip():
            raise WorkerConfigError(f"Missing required configuration \"{key}\" which has no "
                                    f"default value.")
    check_converters(worker)
    mode = worker.get("connect.protocol", "sessioned").strip().lower()
    if mode not in MODES:
        raise WorkerConfigError(f"Invalid value {mode} for configuration connect.protocol: "
                                f"String must be one of: eager, compatible, sessioned")
    eos_mode = worker.get("exactly.once.source.support", "disabled").strip().lower()
    if eos_mode not in WORKER_MODES:
        raise WorkerConfigError(f"Invalid value {eos_mode} for configuration "
                                f"exactly.once.source.support: String must be one of (case "
                                f"insensitive): {', '.join(WORKER_MODES)}")
    worker["exactly.once.source.support"] = eos_mode
    if worker.get("plugin.path"):
        LOG.warning("plugin.path is ignored: strom finds Python connectors through the "
                    "'strom.connectors' entry points")
    host, port = rest_address(worker)
    adv_host = worker.get("rest.advertised.host.name", "").strip() or host
    adv_port = _int(worker, "rest.advertised.port", port)
    worker_id = f"{adv_host}:{adv_port}"
    bootstrap = worker.setdefault("bootstrap.servers", "localhost:9092")
    group = worker["group.id"].strip()
    clients = worker_client(worker)  # the worker's own clients: its top-level security

    def maker(kind: str, partitions: int) -> Callable[[OnRecord], TopicLog]:
        topic = worker[f"{kind}.storage.topic"].strip()
        replication = _int(worker, f"{kind}.storage.replication.factor", 3)
        return lambda on_record: TopicLog(
            bootstrap, topic, partitions=partitions, replication=replication,
            client_id=f"{group}-{kind}s-{worker_id}", on_record=on_record,
            client_config=clients)

    offsets = OffsetTopicStore(maker("offset", _int(worker, "offset.storage.partitions", 25)))
    statuses = StatusTopicStore(maker("status", _int(worker, "status.storage.partitions", 5)))
    herder_box: list[DistributedHerder] = []
    configs = ConfigTopicStore(maker("config", 1),
                               lambda event: herder_box[0].on_config_event(event))
    member = GroupMember(bootstrap, group,
                         session_timeout_ms=_int(worker, "session.timeout.ms", 10000),
                         rebalance_timeout_ms=_int(worker, "rebalance.timeout.ms", 60000),
                         client_id=f"connect-{worker_id}",
                         security=worker_wire_security(worker))
    herder = DistributedHerder(
        worker_id, worker_url(worker_id) + "/", worker, member=member, mode=mode,
        heartbeat_interval_ms=_int(worker, "heartbeat.interval.ms", 3000),
        max_delay_ms=_int(worker, "scheduled.rebalance.max.delay.ms", 300000),
        offsets=offsets, configs=configs, statuses=statuses)
    herder_box.append(herder)
    return herder, host, port


def run_distributed(worker_file: Path) -> int:
    import uvicorn

    worker = parse_properties(worker_file.read_text(encoding="utf-8"))
    security = rest_security(worker)
    use_tls(security.client_ssl)  # before the herder: its URL and worker calls use it
    herder, host, port = build_herder(worker)
    check_listen(host, port)
    try:
        herder.start()
    except TopicLogError as exc:
        raise WorkerConfigError(str(exc)) from None
    app = build_app(herder, ClusterId(worker_client(worker)), security.basic_auth)
    server = uvicorn.Server(serve_with(
        uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False,
                       lifespan="off"), security.server_ssl))
    LOG.info("distributed worker %s started (group %s)", herder.worker_id, worker["group.id"])
    LOG.info("%s", security.describe(host, port))
    for sig in (signal.SIGTERM, signal.SIGINT):  # see standalone.run_standalone
        signal.signal(sig, lambda *_: None)
    try:
        server.run()
    finally:
        herder.shutdown()
        LOG.info("worker stopped")
    return 0 if server.started else 1
