"""The broker configs strom knows: Kafka's catalogue, plus strom's own names.

Every name of Kafka's broker-config catalogue (:mod:`strom.kafka_configs`, generated from one
Kafka release) is known: DescribeConfigs lists it (internal ones aside) with Kafka's type,
default and documentation, and AlterConfigs accepts it exactly when Kafka's
``DynamicBrokerConfig`` lets it change (update mode per-broker or cluster-wide; a per-broker
one only for a broker id, not the cluster default), validated by Kafka's type and validator.
strom *applies* a dynamic config at once when it acts on it (:data:`APPLIED`: the broker
synonyms of the topic configs, ``log.retention.ms`` ... ``message.max.bytes``, and
``replica.alter.log.dirs.io.max.bytes.per.second``); the other dynamic names are stored and
described but change nothing (:data:`NO_EFFECT`, listed in docs/configs.md). strom's own names
(``strom.*``, the ZooKeeper connection Kafka 4 dropped, names strom still reads that Kafka 4
removed) are read-only, except the broker synonyms of strom's own topic configs.
Kafka reads synonyms in order, first one set wins: ``log.retention.ms`` before
``log.retention.minutes`` before ``log.retention.hours``.

Types are Kafka's ``ConfigDef.Type`` as DescribeConfigs v3+ reports them (``config_type``).
"""

from __future__ import annotations

from typing import NamedTuple

from strom import kafka_configs as kc
from strom.config import BROKER_DEFAULTS
from strom.storage.errors import InvalidConfigError
from strom.storage.log_config import TOPIC_CONFIGS, validate_topic_config

# DescribeConfigsResponse.ConfigType ids
TYPE_IDS = {
    "boolean": 1, "string": 2, "int": 3, "short": 4, "long": 5, "double": 6, "list": 7,
    "class": 8, "password": 9,
}  # fmt: skip


class BrokerConfigDef(NamedTuple):
    type: str
    default: str | None  # Kafka's default as a string (strom's where it differs); None: none
    doc: str
    dynamic: bool = False
    update_mode: str = kc.READ_ONLY
    kafka: kc.KafkaConfigDef | None = None  # None: a name of strom's own
    internal: bool = False


_B = BrokerConfigDef
# Names strom reads that Kafka's catalogue lacks (Kafka 4 dropped them, or they are strom's).
_STROM_ONLY: dict[str, BrokerConfigDef] = {
    "controlled.shutdown.max.retries": _B("int", "3", "controlled shutdown attempts"),
    "controlled.shutdown.retry.backoff.ms": _B("long", "5000",
        "wait between controlled shutdown attempts"),
    # the static configs that encrypt dynamic password configs at rest (Kafka's, ZooKeeper
    # mode; strom.broker.password_encoder)
    "password.encoder.secret": _B("password", None,
        "The secret used for encoding dynamically configured passwords for this broker."),
    "password.encoder.old.secret": _B("password", None,
        "The old secret that was used for encoding dynamically configured passwords: "
        "at start-up they are decoded with it and re-encoded with password.encoder.secret"),
    "password.encoder.keyfactory.algorithm": _B("string", None,
        "The SecretKeyFactory algorithm used for encoding dynamically configured passwords "
        "(unset: PBKDF2WithHmacSHA512)"),
    "password.encoder.cipher.algorithm": _B("string", "AES/CBC/PKCS5Padding",
        "The Cipher algorithm used for encoding dynamically configured passwords."),
    "password.encoder.key.length": _B("int", "128",
        "The key length used for encoding dynamically configured passwords."),
    "password.encoder.iterations": _B("int", "4096",
        "The iteration count used for encoding dynamically configured passwords."),
    "leader.imbalance.per.broker.percentage": _B("int", "10",
        "share of a broker's preferred partitions led elsewhere that triggers a rebalance"),
    "strom.admin.listener": _B("string", "127.0.0.1:9644",
        "HOST:PORT of the /metrics and /health endpoints (empty: off)"),
    "strom.controller.enable": _B("boolean", "true",
        "testing: false makes the broker wait for another controller's requests"),
    "strom.fetch.sendfile.enable": _B("boolean", "true", "serve fetches with sendfile"),
    "zookeeper.connect": _B("string", None,
        "ZooKeeper connection string: set, a cluster member; unset, the embedded store"),
    "zookeeper.connection.timeout.ms": _B("int", None,
        "how long to wait for the ZooKeeper connection (unset: the session timeout)"),
    "zookeeper.session.timeout.ms": _B("int", "18000", "ZooKeeper session timeout"),
}  # fmt: skip

# Coarser-unit synonyms of topic-config synonyms, in Kafka's precedence order
# (DynamicBrokerConfig.brokerConfigSynonyms).
SYNONYM_GROUPS: tuple[tuple[str, ...], ...] = (
    ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    ("log.roll.ms", "log.roll.hours"),
    ("log.roll.jitter.ms", "log.roll.jitter.hours"),
)
# broker property -> the strom topic config it is the default of
TOPIC_OF: dict[str, str] = {
    s.broker_property: n for n, s in TOPIC_CONFIGS.items() if s.broker_property is not None
}
#: dynamic configs strom acts on as soon as they change
APPLIED = frozenset(TOPIC_OF) | {"replica.alter.log.dirs.io.max.bytes.per.second"} | {
    # TLS listeners reload their key and trust stores (strom.security.tls.RELOADED_KEYS)
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.truststore.type",
    "ssl.truststore.location", "ssl.truststore.password", "ssl.truststore.certificates",
}


def _catalogue() -> dict[str, BrokerConfigDef]:
    out = {
        name: BrokerConfigDef(k.type, k.default, k.doc, k.dynamic, k.update_mode, k, k.internal)
        for name, k in kc.BROKER.items()
    }
    for topic in TOPIC_CONFIGS.values():  # strom's own topic configs' broker synonyms
        prop = topic.broker_property
        if prop is not None and prop not in out:
            out[prop] = BrokerConfigDef(topic.type, topic.default, topic.doc, True,
                                        kc.CLUSTER_WIDE)  # fmt: skip
    for name, own in _STROM_ONLY.items():
        out.setdefault(name, own)
    for name, default in BROKER_DEFAULTS.items():  # strom's defaults where Kafka's differ
        if name in out:
            out[name] = out[name]._replace(default=default)
        else:
            out[name] = BrokerConfigDef("string", default, "")
    return out


BROKER_CONFIGS: dict[str, BrokerConfigDef] = _catalogue()
DYNAMIC_CONFIGS = frozenset(n for n, d in BROKER_CONFIGS.items() if d.dynamic)
#: dynamic only for one broker id, never at the cluster default (Kafka's PerBrokerConfigs)
PER_BROKER_ONLY = frozenset(n for n, d in BROKER_CONFIGS.items()
                            if d.update_mode == kc.PER_BROKER)  # fmt: skip
#: dynamic configs of Kafka's PASSWORD type: encrypted in the store (is_dynamic_password)
DYNAMIC_PASSWORDS = frozenset(n for n in DYNAMIC_CONFIGS if BROKER_CONFIGS[n].type == "password")
#: what DescribeConfigs lists for a broker: every name but Kafka's internal ones
DESCRIBED = frozenset(n for n, d in BROKER_CONFIGS.items() if not d.internal)
#: Kafka's dynamic configs strom stores and describes but does not act on (docs/configs.md)
NO_EFFECT = frozenset(DYNAMIC_CONFIGS - APPLIED)


def check_value(name: str, value: str) -> None:
    """Raise :class:`strom.kafka_configs.ConfigValueError` (Kafka's message) unless
    ``value`` is valid for broker config ``name``: Kafka's type and validator, except for the
    broker synonyms of strom's topic configs, which take strom's topic rules (the same at both
    levels; they allow what strom's topics allow, e.g. a ``segment.bytes`` under Kafka 4's
    1 MiB minimum)."""
    spec = BROKER_CONFIGS.get(name)
    topic_name = TOPIC_OF.get(name)
    if topic_name is not None:
        if spec is not None and spec.kafka is not None:
            kc.parse(spec.kafka, value)  # the type, with Kafka's message
        try:
            validate_topic_config(topic_name, value)
        except InvalidConfigError as exc:
            raise kc.ConfigValueError(str(exc).replace(topic_name, name)) from None
        return
    if spec is not None and spec.kafka is not None:
        kc.check_value(spec.kafka, value)


def base_name(name: str) -> str:
    """The config a listener's override ``listener.name.<listener>.<name>`` sets (Kafka's
    listener-prefixed dynamic configs, e.g. a TLS listener's key store, KIP-226), or a SASL
    mechanism's on a listener, ``listener.name.<listener>.<mechanism>.<name>`` (e.g.
    ``listener.name.sasl_ssl.plain.sasl.jaas.config``: a ``sasl.*`` config or
    ``connections.max.reauth.ms``); other names unchanged."""
    if name.startswith("listener.name."):
        parts = name.split(".", 3)
        if len(parts) == 4 and parts[3] in BROKER_CONFIGS:
            return parts[3]
        parts = name.split(".", 4)
        if len(parts) == 5 and parts[4] in BROKER_CONFIGS and (
                parts[4].startswith("sasl.") or parts[4] == "connections.max.reauth.ms"):
            return parts[4]
    return name


def synonyms(name: str) -> tuple[str, ...]:
    """The names that set the same thing, in Kafka's precedence order (``name`` alone if
    it has none)."""
    for group in SYNONYM_GROUPS:
        if name in group:
            return group
    return (name,)


def type_id(name: str) -> int:
    spec = BROKER_CONFIGS.get(base_name(name))
    return TYPE_IDS.get(spec.type, 0) if spec is not None else 0


def is_sensitive(name: str) -> bool:
    spec = BROKER_CONFIGS.get(base_name(name))  # a listener's inline TLS key too
    return (spec is not None and spec.type == "password") or "password" in name


def is_dynamic_password(name: str) -> bool:
    """Whether dynamic config ``name`` is stored encrypted: Kafka's rule
    (``DynamicBrokerConfig.isPasswordConfig``), a name ending with a dynamic PASSWORD config,
    so a listener's (and a listener mechanism's) override is one too."""
    return any(name == p or name.endswith("." + p) for p in DYNAMIC_PASSWORDS)
