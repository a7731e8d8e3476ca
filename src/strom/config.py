"""Broker configuration under Kafka's own property names.

Sources, later ones winning: Kafka's defaults below, a ``--config`` properties file
(``key=value`` lines, ``#`` comments, as ``server.properties``), repeated ``--set key=value``
(together the *static* config), then the dynamic configs kept in the metadata store: the
cluster-wide default, then this broker's own (:mod:`strom.broker.dynamic_config`). As in
Kafka, a name set in a higher layer hides its synonyms in the lower ones (a dynamic
``log.retention.hours`` beats a static ``log.retention.ms``).
Values stay strings (as Kafka's are in a properties file); the typed getters parse them and
raise :class:`ConfigError` with the property's name when a value does not parse.
Topic-level defaults (``log.retention.ms`` …) are read by :mod:`strom.storage.log_config`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

BROKER_DEFAULTS: dict[str, str] = {
    "node.id": "1",
    "zookeeper.session.timeout.ms": "18000",
    "num.partitions": "1",
    "default.replication.factor": "1",
    "auto.create.topics.enable": "true",
    "delete.topic.enable": "true",
    "message.max.bytes": "1048588",
    "socket.request.max.bytes": "104857600",
    "queued.max.requests": "500",
    "log.retention.check.interval.ms": "300000",
    "log.flush.scheduler.interval.ms": "1000",
    "log.flush.offset.checkpoint.interval.ms": "60000",
    "offsets.topic.num.partitions": "50",
    "offsets.topic.replication.factor": "3",
    "offsets.topic.segment.bytes": "104857600",
    "offsets.retention.minutes": "10080",
    "offsets.retention.check.interval.ms": "600000",
    "group.initial.rebalance.delay.ms": "3000",
    "group.min.session.timeout.ms": "6000",
    "group.max.session.timeout.ms": "1800000",
    "group.max.size": "2147483647",
    # KIP-848 consumer groups (strom.broker.group.consumer), Kafka's defaults
    "group.consumer.heartbeat.interval.ms": "5000",
    "group.consumer.min.heartbeat.interval.ms": "5000",
    "group.consumer.max.heartbeat.interval.ms": "15000",
    "group.consumer.session.timeout.ms": "45000",
    "group.consumer.min.session.timeout.ms": "45000",
    "group.consumer.max.session.timeout.ms": "60000",
    "group.consumer.assignors": "uniform,range",
    "group.consumer.max.size": "2147483647",
    "group.consumer.migration.policy": "bidirectional",
    "log.cleaner.enable": "true",
    "log.cleaner.backoff.ms": "15000",
    "transactional.id.expiration.ms": "604800000",
    "transaction.state.log.num.partitions": "50",
    "transaction.state.log.segment.bytes": "104857600",
    "transaction.state.log.replication.factor": "3",  # capped to the live brokers (cluster)
    "transaction.state.log.min.isr": "2",  # a cluster's __transaction_state min.insync.replicas
    "transaction.max.timeout.ms": "900000",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "10000",
    "transaction.remove.expired.transaction.cleanup.interval.ms": "3600000",
    "producer.id.expiration.ms": "86400000",
    # share groups (KIP-932; strom.broker.share) and the share coordinator, Kafka's defaults
    "group.share.record.lock.duration.ms": "30000",
    "group.share.min.record.lock.duration.ms": "15000",
    "group.share.max.record.lock.duration.ms": "60000",
    "group.share.delivery.count.limit": "5",
    "group.share.min.delivery.count.limit": "2",
    "group.share.max.delivery.count.limit": "10",
    "group.share.partition.max.record.locks": "2000",
    "group.share.min.partition.max.record.locks": "100",
    "group.share.max.partition.max.record.locks": "4000",
    "group.share.session.timeout.ms": "45000",
    "group.share.min.session.timeout.ms": "45000",
    "group.share.max.session.timeout.ms": "60000",
    "group.share.heartbeat.interval.ms": "5000",
    "group.share.min.heartbeat.interval.ms": "5000",
    "group.share.max.heartbeat.interval.ms": "15000",
    "group.share.max.size": "200",
    "group.share.max.share.sessions": "2000",
    "share.coordinator.state.topic.num.partitions": "50",
    "share.coordinator.state.topic.replication.factor": "3",  # capped to the live brokers
    "share.coordinator.state.topic.segment.bytes": "104857600",
    "share.coordinator.state.topic.min.isr": "2",
    "share.coordinator.snapshot.update.records.per.snapshot": "500",
    "share.coordinator.write.timeout.ms": "5000",
    "share.coordinator.cold.partition.snapshot.interval.ms": "300000",
    "share.coordinator.state.topic.prune.interval.ms": "300000",
    "producer.id.expiration.check.interval.ms": "600000",
    # HOST:PORT of /metrics and /health/* (strom.broker.observability.admin); empty: off
    "strom.admin.listener": "127.0.0.1:9644",
    "replica.lag.time.max.ms": "30000",
    "replica.fetch.wait.max.ms": "500",
    "replica.fetch.min.bytes": "1",
    "replica.fetch.max.bytes": "1048576",
    "replica.fetch.response.max.bytes": "10485760",
    "replica.fetch.backoff.ms": "1000",
    "replica.high.watermark.checkpoint.interval.ms": "5000",
    "max.incremental.fetch.session.cache.slots": "1000",
    # the controller (cluster mode, issue 9)
    "auto.leader.rebalance.enable": "true",
    "leader.imbalance.check.interval.seconds": "300",
    "leader.imbalance.per.broker.percentage": "10",
    "controlled.shutdown.enable": "true",
    "controlled.shutdown.max.retries": "3",
    "controlled.shutdown.retry.backoff.ms": "5000",
    "controller.socket.timeout.ms": "30000",
    # client quotas (strom.security.quotas): the samples and their span of every rate measured
    "quota.window.num": "11",
    "quota.window.size.seconds": "1",
}


#: Broker properties strom reads beside :data:`BROKER_DEFAULTS` and the topic defaults
#: broker properties (``log.retention.ms`` ... from :mod:`strom.storage.log_config`).
EXTRA_KNOWN_KEYS: set[str] = {
    "broker.id",
    "broker.rack",
    "log.dir",  # unset: --data-dir (strom.broker.meta_properties.configured_log_dirs)
    "log.dirs",  # comma-separated; wins over log.dir
    "replica.selector.class",  # KIP-392 (strom.replication.replica_selector); unset: the leader
    "replica.alter.log.dirs.io.max.bytes.per.second",  # log dir moves (broker.log_mover)
    "zookeeper.connect",  # set: a cluster member on ZooKeeper; unset: the embedded store
    "zookeeper.connection.timeout.ms",  # unset: zookeeper.session.timeout.ms
    "strom.fetch.sendfile.enable",
    "offset.metadata.max.bytes",
    "strom.controller.enable",  # internal/testing: false = wait for a controller's requests
    # the admin listener's bearer token and TLS (strom.broker.observability.admin)
    "strom.admin.listener.token.file",
    *(f"strom.admin.listener.{k}" for k in (
        "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password",
        "ssl.key.password", "ssl.keystore.certificate.chain", "ssl.keystore.key",
        "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password",
        "ssl.truststore.certificates", "ssl.client.auth", "ssl.enabled.protocols",
        "ssl.cipher.suites")),
    # listeners and TLS (strom.security.listeners, strom.security.tls); each also as
    # listener.name.<listener>.<key>
    "listeners", "advertised.listeners", "listener.security.protocol.map",
    "inter.broker.listener.name", "security.inter.broker.protocol",
    "sasl.mechanism.inter.broker.protocol", "sasl.enabled.mechanisms",
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password",
    "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.key.password",
    "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password",
    "ssl.truststore.certificates", "ssl.client.auth", "ssl.enabled.protocols",
    "ssl.cipher.suites", "ssl.principal.mapping.rules", "ssl.protocol",
    "ssl.endpoint.identification.algorithm",
    # SASL (strom.security.sasl.config: KNOWN_KEYS); each also per listener and mechanism
    "sasl.jaas.config", "connections.max.reauth.ms", "connection.failed.authentication.delay.ms",
    "sasl.oauthbearer.jwks.endpoint.url", "sasl.oauthbearer.expected.audience",
    "sasl.oauthbearer.expected.issuer", "sasl.oauthbearer.sub.claim.name",
    "sasl.oauthbearer.scope.claim.name", "sasl.oauthbearer.clock.skew.seconds",
    "sasl.oauthbearer.jwks.endpoint.refresh.ms",
    # authorization (strom.security.acl): empty class name = no authorizer, everything allowed
    "authorizer.class.name",
    "super.users",  # User:a;User:b
    "allow.everyone.if.no.acl.found",
    # dynamic password configs encrypted at rest (strom.broker.password_encoder)
    "password.encoder.secret", "password.encoder.old.secret",
    "password.encoder.keyfactory.algorithm", "password.encoder.cipher.algorithm",
    "password.encoder.key.length", "password.encoder.iterations",
}


def known_keys() -> set[str]:
    """Every broker property strom understands (for the unknown-key warning)."""
    from strom.storage import log_config  # storage only here: every strom command imports this

    keys = set(BROKER_DEFAULTS) | EXTRA_KNOWN_KEYS
    keys |= {d.broker_property for d in log_config.TOPIC_CONFIGS.values() if d.broker_property}
    fallbacks = getattr(log_config, "_BROKER_FALLBACKS", {})  # log.retention.hours ...
    keys |= {name for pairs in fallbacks.values() for name, _unit in pairs}
    return keys


def unknown_keys(props: Mapping[str, str]) -> list[tuple[str, str | None]]:
    """(key, closest known key or None) for each key strom does not know, sorted."""
    import difflib

    known = known_keys()
    result = []
    for key in sorted(props):
        if key.startswith("listener.name.") and _listener_key_known(key, known):
            continue
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.8)
            result.append((key, close[0] if close else None))
    return result


def _listener_key_known(key: str, known: set[str]) -> bool:
    """``listener.name.<listener>.[<sasl mechanism>.]<key>`` of a known ``key`` (Kafka's
    per-listener overrides), or of any ``sasl.`` key (their owner checks them)."""
    rest = key.split(".", 3)[3:]  # after listener.name.<listener>.
    if not rest:
        return False
    tail = rest[0]
    parts = tail.split(".", 1)
    return tail in known or tail.startswith("sasl.") or (
        len(parts) == 2 and (parts[1] in known or parts[1].startswith("sasl.")))


class ConfigError(Exception):
    """A configuration value that cannot be used; the message names the property."""


def parse_properties(text: str, source: str = "config") -> dict[str, str]:
    """Parse Java-properties-style ``key=value`` (or ``key: value``) lines."""
    result: dict[str, str] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if sep <= 0:
            raise ConfigError(f"{source}:{lineno}: expected key=value, got {raw!r}")
        result[line[:sep].strip()] = line[sep + 1 :].strip()
    return result


def parse_assignments(items: Iterable[str]) -> dict[str, str]:
    """``["k=v", ...]`` (from repeated ``--set``) into a dict."""
    result: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"expected key=value, got {item!r}")
        result[key.strip()] = value.strip()
    return result


class BrokerConfig:
    """The broker's effective properties (strings) with typed accessors."""

    def __init__(self, overrides: Mapping[str, str] | None = None) -> None:
        self.values: dict[str, str] = dict(BROKER_DEFAULTS)
        self.explicit: dict[str, str] = dict(overrides or {})
        self.dynamic_default: dict[str, str] = {}
        self.dynamic_broker: dict[str, str] = {}
        self.values.update(self.explicit)

    def merged(
        self,
        dynamic_default: Mapping[str, str],
        dynamic_broker: Mapping[str, str],
        synonyms: Callable[[str], Iterable[str]] = lambda name: (name,),
    ) -> dict[str, str]:
        """The effective values with these dynamic layers (``synonyms(name)``: the names a
        higher layer's ``name`` hides below it)."""
        merged: dict[str, str] = {}
        for layer in (self.explicit, dynamic_default, dynamic_broker):
            for key, value in layer.items():
                for synonym in synonyms(key):
                    merged.pop(synonym, None)
                merged[key] = value
        values = dict(BROKER_DEFAULTS)
        values.update(merged)
        if "broker.id" in self.explicit and "node.id" not in self.explicit:
            values["node.id"] = self.explicit["broker.id"]
        return values

    def set_dynamic(
        self,
        dynamic_default: Mapping[str, str],
        dynamic_broker: Mapping[str, str],
        synonyms: Callable[[str], Iterable[str]] = lambda name: (name,),
    ) -> None:
        """Replace the dynamic layers; ``values`` changes in place (readers see it at once)."""
        values = self.merged(dynamic_default, dynamic_broker, synonyms)
        self.dynamic_default = dict(dynamic_default)
        self.dynamic_broker = dict(dynamic_broker)
        self.values.clear()
        self.values.update(values)

    @classmethod
    def load(cls, config_file: Path | None, sets: Iterable[str]) -> BrokerConfig:
        props: dict[str, str] = {}
        if config_file is not None:
            try:
                text = Path(config_file).read_text()
            except OSError as exc:
                raise ConfigError(f"cannot read {config_file}: {exc.strerror}") from None
            except UnicodeDecodeError as exc:
                raise ConfigError(f"cannot read {config_file}: not text ({exc.reason})") from None
            props.update(parse_properties(text, str(config_file)))
        props.update(parse_assignments(sets))
        config = cls(props)
        config.validate()
        return config

    def unknown(self) -> list[tuple[str, str | None]]:
        """The explicitly set keys strom does not know, with a suggestion each."""
        return unknown_keys(self.explicit)

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)

    def get_int(self, key: str) -> int:
        value = self.values.get(key)
        try:
            return int(str(value))
        except ValueError:
            raise ConfigError(f"{key}={value!r} is not an integer") from None

    def get_bool(self, key: str) -> bool:
        value = str(self.values.get(key, "")).lower()
        if value in ("true", "false"):
            return value == "true"
        raise ConfigError(f"{key}={value!r} is not true or false")

    def validate(self) -> None:
        """Parse every typed default-backed property once, so a bad value fails at start-up."""
        for key, default in BROKER_DEFAULTS.items():
            if default in ("true", "false"):
                self.get_bool(key)
            elif default.lstrip("-").isdigit():
                self.get_int(key)
        if "broker.id" in self.explicit and "node.id" not in self.explicit:
            self.values["node.id"] = self.explicit["broker.id"]
            self.get_int("node.id")

    @property
    def node_id(self) -> int:
        return self.get_int("node.id")
