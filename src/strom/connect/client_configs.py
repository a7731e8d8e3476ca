"""The Kafka client settings of a worker's clients, as Kafka Connect derives them.

As Kafka's ``Worker``:

- the worker's own clients (the config/offset/status topics, the group membership, the
  cluster id lookup) take the worker's top-level settings: ``bootstrap.servers``,
  ``security.protocol``, ``ssl.*``, ``sasl.*``;
- a source task's producer takes ``producer.*`` (and the connector's
  ``producer.override.*``), a sink task's consumer ``consumer.*`` (and
  ``consumer.override.*``) — **not** the top-level security settings, exactly as Kafka, whose
  documentation has users repeat them with the prefixes;
- admin clients made for connectors (dead letter queue topics, KIP-875 offsets) take the
  top-level settings with ``admin.*`` over them (Kafka's backward-compatible rule).

Security settings may use the Java client's names (``ssl.truststore.location``,
``sasl.jaas.config``...): they are carried over to librdkafka's by
:func:`strom.admin.client_security.to_librdkafka`, which also drops the worker's server-side
``ssl.*`` keys (``ssl.client.auth`` ...) that only its REST listener uses.
"""

from __future__ import annotations

from collections.abc import Mapping

from strom.admin.client_security import WireSecurity, to_librdkafka
from strom.admin.errors import AdminError
from strom.connect.worker_config import WorkerConfigError

DEFAULT_BOOTSTRAP = "localhost:9092"


def _security(settings: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in settings.items()
            if k == "security.protocol" or k.startswith(("ssl.", "sasl."))}


def _translated(settings: Mapping[str, str], what: str) -> dict[str, str]:
    try:
        return to_librdkafka(settings)
    except AdminError as exc:
        raise WorkerConfigError(f"{what}{exc.message}") from None


def bootstrap(worker: Mapping[str, str]) -> str:
    return worker.get("bootstrap.servers", DEFAULT_BOOTSTRAP)


def prefixed(settings: Mapping[str, str], prefix: str) -> dict[str, str]:
    """The ``prefix``-ed keys of ``settings`` without their prefix."""
    return {k[len(prefix):]: v for k, v in settings.items() if k.startswith(prefix)}


def worker_client(worker: Mapping[str, str]) -> dict[str, str]:
    """The settings of the worker's own clients (module doc)."""
    return {"bootstrap.servers": bootstrap(worker),
            **_translated(_security(worker), "worker settings: ")}


def worker_wire_security(worker: Mapping[str, str]) -> WireSecurity:
    """How the worker's own wire connections (group membership) are secured: TLS and SASL
    PLAIN / SCRAM with the worker's top-level settings; a WorkerConfigError at start for what
    they cannot do."""
    try:
        return WireSecurity.from_properties(worker_client(worker))
    except AdminError as exc:
        raise WorkerConfigError(exc.message) from None


def admin_client(worker: Mapping[str, str]) -> dict[str, str]:
    """An admin client's settings for connectors' needs: the worker's, ``admin.*`` over them."""
    return {**worker_client(worker),
            **_translated(prefixed(worker, "admin."), "admin.")}


def task_client(worker: Mapping[str, str], kind: str,
                overrides: Mapping[str, str]) -> dict[str, str]:
    """A task's ``kind`` (``producer``/``consumer``) settings: ``<kind>.*`` of the worker, then
    the connector's ``<kind>.override.*`` (``overrides``, prefix removed)."""
    return {"bootstrap.servers": bootstrap(worker),
            **_translated({**prefixed(worker, kind + "."), **overrides}, kind + ".")}
