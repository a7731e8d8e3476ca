"""Named listeners under Kafka's property names (sans-IO: strings in, specs out).

A broker listens on one or more **listeners**, each ``NAME://host:port`` (``listeners``), and
tells clients and peers where to reach it through ``advertised.listeners`` (the same names;
unset: ``listeners``, a wildcard host advertised as ``localhost``). Each name maps to a
security protocol through ``listener.security.protocol.map`` (Kafka's default map: each of
PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL to itself). Peers talk on the inter-broker listener,
``inter.broker.listener.name``, or else the listener named after
``security.inter.broker.protocol`` (default PLAINTEXT); setting both is an error, as in Kafka.

Names are case-insensitive and kept upper-case (Kafka's ``ListenerName.normalised``); the
per-listener override of a setting is ``listener.name.<name in lower case>.<key>`` (and for
SASL settings ``listener.name.<name>.<mechanism in lower case>.<key>``), looked up in the
broker's live values, so a dynamic change (KIP-226) is seen on the next lookup.

Invariants of a :class:`Listeners`: names unique, every advertised name is a listener, the
inter-broker name is advertised; :meth:`Listeners.registration_order` puts the inter-broker
listener first (the broker registration's first endpoint is where peers connect).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL = "PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"
SECURITY_PROTOCOLS = (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)
DEFAULT_PROTOCOL_MAP = {p: p for p in SECURITY_PROTOCOLS}
#: the one-listener shortcut's (``--listen``) and an unconfigured broker's listener
DEFAULT_LISTENER = "PLAINTEXT://127.0.0.1:9092"
#: Kafka's default of ``sasl.enabled.mechanisms``
WILDCARDS = ("", "0.0.0.0", "::")
_LISTENER = re.compile(
    r"^(?P<name>[A-Za-z0-9_]+)://(?P<host>\[[^\]]*\]|[^:\[\]]*):(?P<port>-?\d+)$"
)
_NAME = re.compile(r"^[A-Za-z0-9_]+$")

#: the properties this module reads
KEYS = (
    "listeners", "advertised.listeners", "listener.security.protocol.map",
    "inter.broker.listener.name", "security.inter.broker.protocol",
    "sasl.mechanism.inter.broker.protocol", "sasl.enabled.mechanisms",
)  # fmt: skip


class ListenerConfigError(ValueError):
    """A listener setting that cannot be used; the message names the property."""


@dataclass(frozen=True, slots=True)
class ListenerSpec:
    """One listener: its name, address and security protocol, and its settings (``values``:
    the broker's live properties, read through :meth:`get`)."""

    name: str
    host: str
    port: int
    security_protocol: str
    values: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)

    @property
    def prefix(self) -> str:
        """``listener.name.<name>.``: where this listener's own settings live."""
        return f"listener.name.{self.name.lower()}."

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in (SSL, SASL_SSL)

    @property
    def uses_sasl(self) -> bool:
        """Whether a connection must authenticate with SASL before anything is served."""
        return self.security_protocol in (SASL_PLAINTEXT, SASL_SSL)

    @property
    def bind_host(self) -> str | None:
        """The address to bind (None: every interface)."""
        return None if self.host in WILDCARDS else self.host

    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"

    def get(self, key: str, default: str | None = None, mechanism: str | None = None) -> str | None:
        """``key`` for this listener: ``listener.name.<l>.<mechanism>.<key>`` (when a SASL
        mechanism is named), then ``listener.name.<l>.<key>``, then the broker-wide ``key``."""
        values = self.values
        if mechanism is not None:
            found = values.get(f"{self.prefix}{mechanism.lower()}.{key}")
            if found is not None:
                return found
        found = values.get(self.prefix + key)
        if found is not None:
            return found
        return values.get(key, default)

    def overrides(self) -> dict[str, str]:
        """This listener's own settings (``listener.name.<l>.`` stripped)."""
        n = len(self.prefix)
        return {k[n:]: v for k, v in self.values.items() if k.startswith(self.prefix)}


@dataclass(frozen=True, slots=True)
class Listeners:
    """A broker's listeners: where it binds (:attr:`bound`), what it advertises
    (:attr:`advertised`, same names), and which one peers use (:attr:`inter_broker`)."""

    bound: tuple[ListenerSpec, ...]
    advertised: tuple[ListenerSpec, ...]
    inter_broker: str
    #: ``sasl.mechanism.inter.broker.protocol`` (Kafka's default GSSAPI)
    inter_broker_sasl_mechanism: str = "GSSAPI"

    def bound_listener(self, name: str) -> ListenerSpec:
        return next(s for s in self.bound if s.name == name)

    def advertised_listener(self, name: str) -> ListenerSpec:
        return next(s for s in self.advertised if s.name == name)

    @property
    def inter_broker_listener(self) -> ListenerSpec:
        """The inter-broker listener as advertised (where peers connect, and how)."""
        return self.advertised_listener(self.inter_broker)

    def registration_order(self) -> tuple[ListenerSpec, ...]:
        """The advertised listeners, the inter-broker one first (module doc)."""
        first = self.inter_broker_listener
        return (first, *(s for s in self.advertised if s.name != first.name))


def parse_protocol_map(text: str | None) -> dict[str, str]:
    """``listener.security.protocol.map`` (``NAME:PROTOCOL,...``); unset: Kafka's default."""
    if text is None or not text.strip():
        return dict(DEFAULT_PROTOCOL_MAP)
    result: dict[str, str] = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, protocol = item.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not _NAME.match(name):
            raise ListenerConfigError(
                f"listener.security.protocol.map: {item!r} is not NAME:SECURITY_PROTOCOL"
            )
        if protocol not in SECURITY_PROTOCOLS:
            raise ListenerConfigError(
                f"listener.security.protocol.map: unknown security protocol {protocol!r} for "
                f"listener {name} (one of {', '.join(SECURITY_PROTOCOLS)})"
            )
        if name in result:
            raise ListenerConfigError(f"listener.security.protocol.map: {name} given twice")
        result[name] = protocol
    return result


def parse_listener_list(text: str, key: str) -> list[tuple[str, str, int]]:
    """``NAME://host:port,...`` as (NAME, host, port); hosts without brackets, names upper."""
    result: list[tuple[str, str, int]] = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        m = _LISTENER.match(item)
        if m is None:
            raise ListenerConfigError(f"{key}: {item!r} is not NAME://HOST:PORT")
        port = int(m["port"])
        if not 0 <= port < 65536:  # 0: any free port (tests)
            raise ListenerConfigError(f"{key}: {item!r}: the port must be 0..65535")
        name = m["name"].upper()
        if any(name == n for n, _, _ in result):
            raise ListenerConfigError(f"{key}: listener name {name} is given twice")
        result.append((name, m["host"].strip("[]"), port))
    if not result:
        raise ListenerConfigError(f"{key} is empty")
    return result


def _specs(items: list[tuple[str, str, int]], protocols: Mapping[str, str], key: str,
           values: Mapping[str, str]) -> tuple[ListenerSpec, ...]:  # fmt: skip
    specs = []
    for name, host, port in items:
        protocol = protocols.get(name)
        if protocol is None:
            raise ListenerConfigError(
                f"{key}: no security protocol for listener {name} in listener.security.protocol.map"
            )
        specs.append(ListenerSpec(name, host, port, protocol, values))
    return tuple(specs)


def from_config(values: Mapping[str, str], listen: str | None = None,
                advertised: str | None = None) -> Listeners:  # fmt: skip
    """The listeners of a broker with these properties. ``listen`` / ``advertised``: the
    ``--listen`` / ``--advertised-listener`` shortcuts (HOST:PORT, a PLAINTEXT listener),
    which may not be combined with ``listeners`` / ``advertised.listeners``."""
    protocols = parse_protocol_map(values.get("listener.security.protocol.map"))
    if listen is not None and values.get("listeners"):
        raise ListenerConfigError(
            "--listen and the property listeners are both set: give one of them"
        )
    if advertised is not None and values.get("advertised.listeners"):
        raise ListenerConfigError(
            "--advertised-listener and the property advertised.listeners "
            "are both set: give one of them"
        )
    if listen is not None:
        text = f"{PLAINTEXT}://{listen}"
        key = "--listen"
    else:
        text = values.get("listeners") or DEFAULT_LISTENER
        key = "listeners"
    bound = _specs(parse_listener_list(text, key), protocols, key, values)
    if advertised is not None:
        if len(bound) != 1:
            raise ListenerConfigError("--advertised-listener needs exactly one listener")
        adv_items = [
            (
                bound[0].name,
                *parse_listener_list(f"X://{advertised}", "--advertised-listener")[0][1:],
            )
        ]
        adv_key = "--advertised-listener"
    elif values.get("advertised.listeners"):
        adv_key = "advertised.listeners"
        adv_items = parse_listener_list(values["advertised.listeners"], adv_key)
        names = {s.name for s in bound}
        for name, host, _port in adv_items:
            if name not in names:
                raise ListenerConfigError(
                    f"advertised.listeners: {name} is not one of the listeners "
                    f"({', '.join(sorted(names))})"
                )
            if host in ("0.0.0.0", "::"):
                raise ListenerConfigError(
                    f"advertised.listeners: {name} cannot advertise the wildcard {host!r}"
                )
    else:
        adv_key = "listeners"
        adv_items = [(s.name, "localhost" if s.host in WILDCARDS else s.host, s.port)
                     for s in bound]  # fmt: skip
    adv = _specs(adv_items, protocols, adv_key, values)
    inter_name = values.get("inter.broker.listener.name")
    inter_protocol = values.get("security.inter.broker.protocol")
    if inter_name and inter_protocol:
        raise ListenerConfigError(
            "only one of inter.broker.listener.name and security.inter.broker.protocol may be set"
        )
    if inter_name:
        inter = inter_name.strip().upper()
        what = f"inter.broker.listener.name={inter_name}"
    else:
        inter = (inter_protocol or PLAINTEXT).strip().upper()
        if inter not in SECURITY_PROTOCOLS:
            raise ListenerConfigError(
                f"security.inter.broker.protocol: unknown security protocol {inter_protocol!r}"
            )
        what = f"security.inter.broker.protocol={inter}"
    if inter not in {s.name for s in adv}:
        raise ListenerConfigError(
            f"{what}: the inter-broker listener must be one of the advertised listeners "
            f"({', '.join(s.name for s in adv)}); set inter.broker.listener.name"
        )
    mechanism = (values.get("sasl.mechanism.inter.broker.protocol") or "GSSAPI").strip().upper()
    return Listeners(bound, adv, inter, mechanism)
