"""Group configs (config resource GROUP, type 32; KIP-848's ``GroupConfig``): kept, described.

Kafka 4 lets a group override the broker's group settings (``consumer.session.timeout.ms``,
``share.*``, ``streams.*``: :data:`strom.kafka_configs.GROUP`) with IncrementalAlterConfigs /
AlterConfigs on a GROUP resource, and DescribeConfigs / ListConfigResources show them. strom
keeps and describes them all with Kafka's rules; the ones in :data:`APPLIED` act: share groups'
(:mod:`strom.broker.share.settings`) and a KIP-848 consumer group's session timeout and
heartbeat interval (:mod:`strom.broker.group.consumer`); the others are accepted without effect
(docs/configs.md).

Stored in the metadata store, one node per group: ``/config/groups/<group id>`` holding
``{"version": 1, "config": {name: value}}``, removed when its set becomes empty (so the node
children are the groups ListConfigResources lists).

Validation (Kafka's ``GroupConfig.validateNames`` / ``validate``): an unknown name, a value of
the wrong type or outside its validator, or outside the broker's bounds for it
(``consumer.session.timeout.ms`` within ``group.consumer.min.session.timeout.ms`` ..
``group.consumer.max.session.timeout.ms``, and the same for every ``<kind>.<x>`` with broker
``group.<kind>.min.<x>`` / ``group.<kind>.max.<x>``) is INVALID_CONFIG.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterable, Mapping

from strom import kafka_configs as kc
from strom.metadata.store import MetadataStore, NodeExistsError, NoNodeError
from strom.storage.errors import InvalidConfigError

PATH = "/config/groups"
#: the group configs strom acts on (share groups, :mod:`strom.broker.share.settings`; KIP-848
#: consumer groups, :mod:`strom.broker.group.consumer`); the others are kept and described only
APPLIED = frozenset({
    "consumer.heartbeat.interval.ms", "consumer.session.timeout.ms",
    "share.auto.offset.reset", "share.delivery.count.limit", "share.heartbeat.interval.ms",
    "share.isolation.level", "share.partition.max.record.locks", "share.record.lock.duration.ms",
    "share.renew.acknowledge.enable", "share.session.timeout.ms",
})  # fmt: skip
GROUP_CONFIG_SOURCE = 8  # DescribeConfigsResponse.ConfigSource.GROUP_CONFIG
DEFAULT_CONFIG_SOURCE = 5


async def read(store: MetadataStore, group: str) -> dict[str, str]:
    try:
        data, _stat = await store.get(f"{PATH}/{group}")
    except NoNodeError:
        return {}
    return {str(k): str(v) for k, v in json.loads(data).get("config", {}).items()}


async def write(store: MetadataStore, group: str, configs: Mapping[str, str]) -> None:
    path = f"{PATH}/{group}"
    if not configs:
        with contextlib.suppress(NoNodeError):
            await store.delete(path)
        return
    data = json.dumps({"version": 1, "config": dict(configs)}, sort_keys=True).encode()
    try:
        await store.set(path, data)
    except NoNodeError:
        try:
            await store.create(path, data)
        except NodeExistsError:
            await store.set(path, data)


async def groups_with_configs(store: MetadataStore) -> list[str]:
    try:
        return sorted(await store.children(PATH))
    except NoNodeError:
        return []


def _broker_bound(name: str, which: str) -> str:
    """``group.<kind>.<which>.<rest>`` for ``<kind>.<rest>`` (e.g. the broker's
    ``group.consumer.min.session.timeout.ms`` for ``consumer.session.timeout.ms``)."""
    kind, _, rest = name.partition(".")
    return f"group.{kind}.{which}.{rest}"


# share.auto.offset.reset (Kafka's ShareGroupAutoOffsetResetStrategy); strom.broker.share uses
# these too
_DURATION = re.compile(r"^P(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?"
                       r"(?:(?P<s>\d+(?:\.\d+)?)S)?)?$", re.IGNORECASE)  # fmt: skip


def duration_ms(text: str) -> int:
    """An ISO-8601 duration as Java's ``Duration.parse`` takes it (``PnDTnHnMn.nS``), in ms."""
    m = _DURATION.match(text.strip())
    if m is None or not any(m.groupdict().values()):
        raise ValueError(f"not an ISO-8601 duration: {text!r}")
    days, hours, minutes = (int(m.group(g) or 0) for g in ("d", "h", "m"))
    seconds = float(m.group("s") or 0)
    return int(((days * 24 + hours) * 60 + minutes) * 60_000 + seconds * 1000)


def check_auto_offset_reset(value: str) -> None:
    """ValueError (Kafka's message) unless ``value`` is ``latest``, ``earliest`` or
    ``by_duration:<ISO-8601 duration>``."""
    text = value.strip().lower()
    if text in ("latest", "earliest"):
        return
    if text.startswith("by_duration:"):
        try:
            if duration_ms(value.strip()[len("by_duration:"):]) >= 0:
                return
        except ValueError:
            pass
    raise ValueError(f"Invalid value `{value}` for configuration share.auto.offset.reset. The "
                     "value must be either 'earliest', 'latest' or of the format "
                     "'by_duration:<PnDTnHnMn.nS.>'.")


def validate(configs: Mapping[str, str | None], broker_values: Mapping[str, str]) -> None:
    """Raise InvalidConfigError unless ``configs`` may be a group's set (Kafka's rules)."""
    for name, value in configs.items():
        defn = kc.GROUP.get(name)
        if defn is None:
            raise InvalidConfigError(f"Unknown group config name: {name}")
        if value is None:
            raise InvalidConfigError(f"Null value not supported for group configs: {name}")
        try:
            parsed = kc.check_value(defn, value)
        except kc.ConfigValueError as exc:
            raise InvalidConfigError(str(exc)) from None
        if name == "share.auto.offset.reset":  # Kafka's ShareGroupAutoOffsetResetStrategy
            try:
                check_auto_offset_reset(value)
            except ValueError as exc:
                raise InvalidConfigError(str(exc)) from None
        if not isinstance(parsed, int) or isinstance(parsed, bool):
            continue
        low_name, high_name = _broker_bound(name, "min"), _broker_bound(name, "max")
        low, high = _broker_value(low_name, broker_values), _broker_value(high_name, broker_values)
        if low is not None and parsed < low:
            raise InvalidConfigError(f"{name} must be greater than or equal to {low_name}")
        if high is not None and parsed > high:
            raise InvalidConfigError(f"{name} must be less than or equal to {high_name}")


def _broker_value(name: str, broker_values: Mapping[str, str]) -> int | None:
    value = broker_values.get(name)
    if value is None:
        defn = kc.BROKER.get(name)
        value = defn.default if defn is not None else None
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def describe(configs: Mapping[str, str], broker_values: Mapping[str, str],
             keys: Iterable[str] | None = None) -> list[tuple[str, str | None, int, str, str]]:  # fmt: skip
    """(name, value, source, type, doc) of every group config (or those in ``keys``): the
    group's own value (GROUP_CONFIG), else the broker's setting it overrides (``group.<kind>.
    <rest>``) or Kafka's default (DEFAULT_CONFIG)."""
    wanted = set(keys) if keys is not None else None
    out: list[tuple[str, str | None, int, str, str]] = []
    for name, defn in sorted(kc.GROUP.items()):
        if wanted is not None and name not in wanted:
            continue
        if name in configs:
            out.append((name, configs[name], GROUP_CONFIG_SOURCE, defn.type, defn.doc))
            continue
        kind, _, rest = name.partition(".")
        value = broker_values.get(f"group.{kind}.{rest}", defn.default)
        out.append((name, value, DEFAULT_CONFIG_SOURCE, defn.type, defn.doc))
    return out
