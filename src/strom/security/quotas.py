"""Client quotas as Kafka models them (KIP-13, KIP-55, KIP-124, KIP-546), without I/O.

Entities
    A quota entity is a user, a client id, or both, each component a name or the *default*
    (Kafka's ``<default>``). :class:`Entity` holds them in the metadata store's form: a user or
    client id **sanitized** as Kafka's ``Sanitizer`` does (URL-encoding with ``%20`` for a space,
    ``%2A`` for ``*``), the default as the literal ``<default>`` (a real name ``<default>``
    sanitizes to ``%3Cdefault%3E``, so the two never meet), ``None`` for a component the entity
    does not have. The nodes are ``/config/users/<u>``, ``/config/clients/<c>`` and
    ``/config/users/<u>/clients/<c>`` (:mod:`strom.security.quota_store`).

Keys
    ``producer_byte_rate`` and ``consumer_byte_rate`` (bytes/s, Kafka's LONG),
    ``request_percentage`` (percent of one request thread's time, DOUBLE) and
    ``controller_mutation_rate`` (DOUBLE: partitions created or deleted per second, KIP-599;
    enforced by CreateTopics, CreatePartitions and DeleteTopics, see ``docs/quotas.md``).

Precedence (Kafka's ``DefaultQuotaCallback``), resolved separately for each key: the first of
``users/<u>/clients/<c>``, ``users/<u>/clients/<default>``, ``users/<u>``,
``users/<default>/clients/<c>``, ``users/<default>/clients/<default>``, ``users/<default>``,
``clients/<c>``, ``clients/<default>`` that sets the key. The entity that matched decides who
shares one rate measurement (Kafka's metric tags): a user-and-client entity measures each
(user, client id) pair, a user entity each user across its client ids, a client-id entity
each client id across users; a default stands for each name it matches, never for all of them.

Measurement: every quota is measured as Kafka's ``Rate`` over a ``SampledStat``
(``quota.window.num`` samples of ``quota.window.size.seconds`` each; the rate is the samples'
sum over the window elapsed, at least ``num - 1`` whole windows): the quota metrics.

Throttle times:

- ``request_percentage`` (Kafka's ``ClientRequestQuotaManager``): a value is recorded, then
  the rate checked; above the bound the throttle time is ``(rate - bound) / bound * window``
  ms, rounded (Kafka's ``QuotaUtils.throttleTime``), at most one window.
- the byte rates and ``controller_mutation_rate``: a **token bucket** (Kafka's
  ``TokenBucket``, which Kafka uses for ``controller_mutation_rate``, KIP-599): credits refill
  at the bound per second up to a burst of ``bound * num * window``; a value takes its credits;
  below zero the throttle time is ``-credits / bound`` s, the time to refill to zero. Kafka
  throttles the byte rates from the windowed rate instead; with a client that always has a
  request ready (a producer with a backlog) that formula settles into a standing wave: a burst
  fills one sample, the client is throttled until the rate is back at the bound, and when the
  burst's sample leaves the window the rate drops far below it and the next burst follows (a
  simulation with 3 samples: 3.0, 0.1, 0.1, 1.7, 1.3, 0.1, 0.7, 2.3 times the bound in
  successive seconds; with 11 samples one 11-second burst every 11 s). The long-run rate is
  the bound either way, but a 15 s measurement of it lands anywhere between 0.85 and 1.1 of
  it, depending on how many bursts it holds. The bucket gives the same long-run rate and the
  same allowance after a pause (the burst), and a steady rate at the bound while the client
  keeps sending.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from strom.metadata.entity_configs import desanitize, sanitize
from strom.protocol.errors import ErrorCode, KafkaError

DEFAULT = "<default>"
USER, CLIENT_ID = "user", "client-id"

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
#: key -> Kafka's config type (LONG values must be whole numbers)
QUOTA_KEYS: dict[str, str] = {
    PRODUCER_BYTE_RATE: "LONG",
    CONSUMER_BYTE_RATE: "LONG",
    REQUEST_PERCENTAGE: "DOUBLE",
    CONTROLLER_MUTATION_RATE: "DOUBLE",
}
#: the keys a broker enforces (a manager each)
ENFORCED = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE, CONTROLLER_MUTATION_RATE)
#: request time is recorded as percent of a second per nanosecond (Kafka's NanosToPercentagePerSecond)
PERCENT_PER_SECOND = 100.0


class QuotaError(ValueError):
    """An entity, filter or alteration Kafka refuses: ``code`` is the Kafka error's name
    (``invalid_request`` or ``unsupported_version``), the message Kafka's."""

    def __init__(self, message: str, code: str = "invalid_request") -> None:
        super().__init__(message)
        self.code = code


def user_name(principal: str) -> str:
    """The user of a ``User:NAME`` principal (Kafka's ``KafkaPrincipal.getName``)."""
    kind, sep, name = principal.partition(":")
    return name if sep else principal


@dataclass(frozen=True, slots=True)
class Entity:
    """One quota entity in the store's form (module doc): ``None`` = component absent."""

    user: str | None = None
    client: str | None = None

    @classmethod
    def of(cls, user: str | None = None, client: str | None = None, *,
           default_user: bool = False, default_client: bool = False) -> Entity:  # fmt: skip
        """From raw names (sanitized here); ``default_*`` for the default of a component."""
        return cls(DEFAULT if default_user else None if user is None else sanitize(user),
                   DEFAULT if default_client else None if client is None else sanitize(client))

    def components(self) -> list[tuple[str, str | None]]:
        """(entity type, raw name or None for the default), as the wire has them."""
        out: list[tuple[str, str | None]] = []
        if self.user is not None:
            out.append((USER, None if self.user == DEFAULT else desanitize(self.user)))
        if self.client is not None:
            out.append((CLIENT_ID, None if self.client == DEFAULT else desanitize(self.client)))
        return out

    def describe(self) -> str:
        """``user 'alice', client-id <default>``: for messages and the CLI."""
        return ", ".join(f"{kind} {'<default>' if name is None else repr(name)}"
                         for kind, name in self.components())  # fmt: skip


def entity_from_components(components: Iterable[tuple[str, str | None]]) -> Entity:
    """Kafka's ``parseAndSanitizeQuotaEntity`` plus the combinations ZooKeeper mode accepts;
    raises :class:`QuotaError` with Kafka's messages."""
    user: str | None = None
    client: str | None = None
    seen = 0
    for kind, name in components:
        seen += 1
        stored = DEFAULT if name is None else sanitize(name)
        if kind == USER:
            user = stored
        elif kind == CLIENT_ID:
            client = stored
        elif kind == "ip":
            raise QuotaError("IP quotas are not supported by strom")
        else:
            raise QuotaError(f"Unhandled client quota entity type: {kind}")
        if name is not None and name == "":
            raise QuotaError(f"Empty {kind} not supported")
    if not seen:
        raise QuotaError("Invalid empty client quota entity")
    if user is None and client is None:
        raise QuotaError("Invalid client quota entity")
    return Entity(user, client)


def check_value(key: str, value: float) -> str:
    """The value as the store keeps it (a string, as Kafka's Properties), or QuotaError with
    Kafka's messages (KRaft's ``ClientQuotaControlManager.validateQuotaKeyValue``)."""
    kind = QUOTA_KEYS.get(key)
    if kind is None:
        raise QuotaError(f"Invalid configuration key {key}")
    if math.isnan(value) or value <= 0:
        raise QuotaError(f"Quota {key} must be greater than 0")
    if kind == "LONG":
        if value > 2.0**63 - 1:
            raise QuotaError(f"Proposed value for {key} is too large for a LONG.")
        if abs(value % 1.0) > 1e-6:
            raise QuotaError(f"{key} cannot be a fractional value.")
        return str(int(value))
    if math.isinf(value):
        raise QuotaError(f"Quota {key} must be a finite number")
    return repr(float(value))


def parse_configs(config: Mapping[str, object]) -> dict[str, float]:
    """The quota keys of a stored ``config`` map (other keys, SCRAM credentials of the same
    user node, are not ours); a value that does not parse is left out."""
    out: dict[str, float] = {}
    for key, raw in config.items():
        if key in QUOTA_KEYS:
            try:
                value = float(str(raw))
            except ValueError:
                continue
            if value > 0 and not math.isinf(value):
                out[key] = value
    return out


# --- measurement ------------------------------------------------------------------------------
class _Sample:
    __slots__ = ("start_ms", "last_ms", "value", "events")

    def __init__(self, now_ms: int) -> None:
        self.reset(now_ms)

    def reset(self, now_ms: int) -> None:
        self.start_ms = now_ms
        self.last_ms = now_ms
        self.value = 0.0
        self.events = 0


class Rate:
    """Kafka's ``Rate`` of a ``WindowedSum``: ``samples`` windows of ``window_ms``; per second."""

    __slots__ = ("samples", "window_ms", "_samples", "_current")

    def __init__(self, samples: int, window_ms: int) -> None:
        self.samples = samples
        self.window_ms = window_ms
        self._samples: list[_Sample] = []
        self._current = 0

    def record(self, value: float, now_ms: int) -> None:
        sample = self._current_sample(now_ms)
        if now_ms - sample.start_ms >= self.window_ms:  # complete: the next one
            self._current = (self._current + 1) % (self.samples + 1)  # one overlapping extra
            if self._current >= len(self._samples):
                sample = _Sample(now_ms)
                self._samples.append(sample)
            else:
                sample = self._samples[self._current]
                sample.reset(now_ms)
        sample.value += value
        sample.events += 1
        sample.last_ms = now_ms

    def _current_sample(self, now_ms: int) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(now_ms))
        return self._samples[self._current]

    def window_size_ms(self, now_ms: int) -> int:
        """The window the rate is measured over (Kafka's ``Rate.windowSize``)."""
        return self.total_and_window(now_ms)[1]

    def measure(self, now_ms: int) -> float:
        """Per second, at ``now_ms``."""
        total, size = self.total_and_window(now_ms)
        return total / (size / 1000.0)

    def total_and_window(self, now_ms: int) -> tuple[float, int]:
        """What the samples hold and the window they are measured over, in one pass: samples
        without a record for ``samples`` windows are reset first (Kafka's
        ``purgeObsoleteSamples``); the window is from the oldest sample's start, at least
        ``samples - 1`` whole windows (Kafka's ``Rate.windowSize``)."""
        expire = self.samples * self.window_ms
        total = 0.0
        oldest = now_ms
        for sample in self._samples:
            if now_ms - sample.last_ms >= expire:
                sample.reset(now_ms)
            else:
                total += sample.value
                if sample.start_ms < oldest:
                    oldest = sample.start_ms
        elapsed = now_ms - oldest
        full, least = elapsed // self.window_ms, self.samples - 1
        if full < least:
            elapsed += (least - full) * self.window_ms
        return total, max(elapsed, 1)


class TokenBucket:
    """Kafka's ``TokenBucket``: ``credits`` refill at ``bound`` per second up to ``burst``
    (``bound * samples * window``); it starts full. A value recorded takes its credits, which
    may go below zero (then the client owes them: the throttle time)."""

    __slots__ = ("credits", "last_ms")

    def __init__(self) -> None:
        self.credits = math.inf  # full: capped at the burst by the first refill
        self.last_ms = 0

    def refill(self, bound: float, burst: float, now_ms: int) -> float:
        """The credits at ``now_ms`` (never before the last update: a clock read late)."""
        elapsed = now_ms - self.last_ms
        if elapsed > 0:
            self.last_ms = now_ms
            self.credits = min(burst, self.credits + bound * elapsed / 1000.0)
        elif self.credits > burst:
            self.credits = burst
        return self.credits

    def record(self, value: float, bound: float, burst: float, now_ms: int) -> float:
        """Take ``value`` credits at ``now_ms``; the credits left."""
        self.credits = min(burst, self.refill(bound, burst, now_ms) - value)
        return self.credits


def bucket_throttle_ms(credits: float, bound: float) -> int:
    """The time to refill ``credits`` to zero (Kafka's ``ControllerMutationQuotaManager
    .throttleTimeMs``); 0 when there are credits."""
    return round(-credits / bound * 1000.0) if credits < 0 else 0


class Sensor:
    """One measurement with its bound: the windowed rate (the metric), the token bucket of a
    quota throttled by it (module doc), and what was throttled (the quota metrics)."""

    __slots__ = ("rate", "bound", "bucket", "throttle_ms_total", "throttled", "recorded",
                 "last_ms")  # fmt: skip

    def __init__(self, rate: Rate, bound: float, bucket: TokenBucket | None = None) -> None:
        self.rate = rate
        self.bound = bound
        self.bucket = bucket
        self.last_ms = 0  # of the latest record (an idle measurement is dropped after an hour)
        self.throttle_ms_total = 0  # sum of the throttle times given (Kafka's throttle-time avg)
        self.throttled = 0  # responses throttled
        self.recorded = 0.0  # everything recorded (bytes, or request-time percent-seconds)


Tags = tuple[str, str]  # (sanitized user or "", client id or ""): who shares a measurement
#: measurements kept before idle ones (Kafka: an hour without a record) are dropped
MAX_SENSORS = 10_000
IDLE_MS = 3_600_000
_UNRESOLVED = Sensor(Rate(1, 1), 0.0)  # a marker: (user, client) not resolved yet


class ClientQuotaManager:
    """One quota key's overrides and measurements (Kafka's ``ClientQuotaManager`` of a type).

    ``enabled`` is False while no entity sets this key: nothing is looked up or recorded then.
    ``bucket``: throttled by a token bucket (module doc), else by the windowed rate, the
    throttle time at most one window when ``bounded``.
    """

    def __init__(self, key: str, samples: int, window_s: int, *, bounded: bool = False,
                 bucket: bool = False) -> None:  # fmt: skip
        self.key = key
        self.samples = samples
        self.window_ms = window_s * 1000
        self.max_throttle_ms = self.window_ms if bounded else None
        self.bucket = bucket
        #: a bucket's burst, in seconds of the bound
        self.burst_s = samples * window_s
        self.overrides: dict[Entity, float] = {}
        self.enabled = False  # some entity sets this key
        self.sensors: dict[Tags, Sensor] = {}
        #: (user, client) -> its measurement (None: unlimited), until the overrides change
        self._resolved: dict[tuple[str, str], Sensor | None] = {}

    def set(self, entity: Entity, value: float | None) -> None:
        """Set (or with None remove) ``entity``'s bound; measurements keep going, each with
        the bound now in force."""
        if value is None:
            self.overrides.pop(entity, None)
        else:
            self.overrides[entity] = value
        self.enabled = bool(self.overrides)
        self._resolved.clear()
        for tags, sensor in list(self.sensors.items()):
            bound = self.limit(tags)
            if bound is None:
                del self.sensors[tags]
            else:
                sensor.bound = bound

    def tags(self, user: str, client: str) -> Tags:
        """Who shares the measurement of ``user`` (sanitized) with ``client`` (module doc)."""
        o = self.overrides
        if (Entity(user, client) in o or Entity(user, DEFAULT) in o):
            return (user, client)
        if Entity(user, None) in o:
            return (user, "")
        if Entity(DEFAULT, client) in o or Entity(DEFAULT, DEFAULT) in o:
            return (user, client)
        if Entity(DEFAULT, None) in o:
            return (user, "")
        return ("", client)

    def limit(self, tags: Tags) -> float | None:
        """The bound of a measurement (Kafka's ``quotaLimit``), None: unlimited."""
        user, client = tags
        o = self.overrides
        if user and client:
            for entity in (Entity(user, client), Entity(user, DEFAULT), Entity(DEFAULT, client),
                           Entity(DEFAULT, DEFAULT)):  # fmt: skip
                if entity in o:
                    return o[entity]
            return None
        if user:
            bound = o.get(Entity(user, None))
            return o.get(Entity(DEFAULT, None)) if bound is None else bound
        if client:
            bound = o.get(Entity(None, client))
            return o.get(Entity(None, DEFAULT)) if bound is None else bound
        return None

    def sensor(self, user: str, client: str) -> Sensor | None:
        """The measurement (user, client) records in, None when no quota applies to it."""
        sensor = self._resolved.get((user, client), _UNRESOLVED)
        if sensor is not _UNRESOLVED:
            return sensor
        tags = self.tags(user, client)
        sensor = self.sensors.get(tags)
        if sensor is None:
            bound = self.limit(tags)
            if bound is not None:
                if len(self.sensors) >= MAX_SENSORS:
                    self._drop_idle()
                sensor = self.sensors[tags] = Sensor(Rate(self.samples, self.window_ms), bound,
                                                     TokenBucket() if self.bucket else None)
        if len(self._resolved) >= MAX_SENSORS:
            self._resolved.clear()
        self._resolved[(user, client)] = sensor
        return sensor

    def _drop_idle(self) -> None:
        newest = max(s.last_ms for s in self.sensors.values())
        for tags, sensor in list(self.sensors.items()):
            if newest - sensor.last_ms >= IDLE_MS:
                del self.sensors[tags]
        self._resolved.clear()

    def record(self, user: str, client: str, value: float, now_ms: int) -> int:
        """Record ``value`` for (user, client) at ``now_ms``; the throttle time in ms."""
        sensor = self.sensor(user, client)
        if sensor is None:
            return 0
        rate = sensor.rate
        rate.record(value, now_ms)
        sensor.recorded += value
        sensor.last_ms = now_ms
        bucket = sensor.bucket
        if bucket is not None:
            bound = sensor.bound
            return bucket_throttle_ms(bucket.record(value, bound, bound * self.burst_s, now_ms),
                                      bound)  # fmt: skip
        total, window_ms = rate.total_and_window(now_ms)
        measured = total * 1000.0 / window_ms
        bound = sensor.bound
        if measured <= bound:
            return 0
        throttle = round((measured - bound) / bound * window_ms)
        if self.max_throttle_ms is not None:
            throttle = min(throttle, self.max_throttle_ms)
        return int(throttle)

    def unrecord(self, user: str, client: str, value: float, now_ms: int) -> None:
        """Take back a value (a throttled Fetch answers without its records: Kafka's
        ``unrecordQuotaSensor``)."""
        sensor = self.sensor(user, client)
        if sensor is not None:
            sensor.rate.record(-value, now_ms)
            sensor.recorded -= value
            if sensor.bucket is not None:
                sensor.bucket.record(-value, sensor.bound, sensor.bound * self.burst_s, now_ms)

    def throttled(self, user: str, client: str, throttle_ms: int) -> None:
        """Count a throttle given (the throttle-time metric)."""
        sensor = self.sensor(user, client)
        if sensor is not None:
            sensor.throttle_ms_total += throttle_ms
            sensor.throttled += 1

    def max_value_in_window(self, user: str, client: str) -> float | None:
        """The most one request may record without being throttled for certain (Kafka's
        ``getMaxValueInQuotaWindow``: the bound over ``samples - 1`` windows); None:
        unlimited. Fetch caps its response size with it, or a response larger than that would
        be throttled, answered empty and asked again for ever."""
        if not self.overrides:
            return None
        bound = self.limit(self.tags(user, client))
        if bound is None:
            return None
        return bound * (self.samples - 1) * self.window_ms / 1000.0


class Throttle(NamedTuple):
    """What a request's quotas decided: the throttle time in ms and the manager that gave
    the longest (Kafka mutes the channel for that one)."""

    ms: int
    key: str


class ClientQuotas:
    """Every entity's quota configs, and the enforced keys' managers.

    ``active`` is False while no entity sets an enforced key: the connection skips every
    quota step then (the produce hot path pays one attribute test). A
    ``controller_mutation_rate`` makes it True as well: the connection mutes a client for the
    throttle time its CreateTopics, CreatePartitions or DeleteTopics answer carries.
    :meth:`update` replaces an entity's whole quota set (as a store node holds it)."""

    def __init__(self, samples: int = 11, window_s: int = 1) -> None:
        if samples < 1 or window_s < 1:
            raise ValueError("quota.window.num and quota.window.size.seconds must be >= 1")
        self.samples = samples
        self.window_s = window_s
        self.entities: dict[Entity, dict[str, float]] = {}
        self.produce = ClientQuotaManager(PRODUCER_BYTE_RATE, samples, window_s, bucket=True)
        self.fetch = ClientQuotaManager(CONSUMER_BYTE_RATE, samples, window_s, bucket=True)
        self.request = ClientQuotaManager(REQUEST_PERCENTAGE, samples, window_s, bounded=True)
        self.mutation = ClientQuotaManager(CONTROLLER_MUTATION_RATE, samples, window_s,
                                           bucket=True)  # fmt: skip
        self.managers = {m.key: m for m in (self.produce, self.fetch, self.request,
                                            self.mutation)}  # fmt: skip
        self.active = False

    def update(self, entity: Entity, configs: Mapping[str, float]) -> bool:
        """Make ``configs`` (quota keys only) ``entity``'s set; True if anything changed."""
        before = self.entities.get(entity, {})
        after = {k: float(v) for k, v in configs.items() if k in QUOTA_KEYS}
        if before == after:
            return False
        if after:
            self.entities[entity] = after
        else:
            self.entities.pop(entity, None)
        for key, manager in self.managers.items():
            if before.get(key) != after.get(key):
                manager.set(entity, after.get(key))
        self.active = any(m.enabled for m in self.managers.values())
        return True

    def get(self, entity: Entity) -> dict[str, float]:
        return dict(self.entities.get(entity, {}))

    def describe(self, components: Iterable[tuple[str, int, str | None]],
                 strict: bool) -> list[tuple[Entity, dict[str, float]]]:  # fmt: skip
        """The entities a DescribeClientQuotas filter matches, with their values (Kafka's
        ``ZkAdminManager.describeClientQuotas``): each component is (entity type, match type
        0 exact / 1 default / 2 any, name); ``strict`` leaves out entities with components
        the filter does not name. Raises :class:`QuotaError` with Kafka's messages."""
        wanted: dict[str, tuple[int, str | None]] = {}
        for kind, match_type, match in components:
            if kind in (USER, CLIENT_ID, "ip"):
                if kind in wanted:
                    which = "client" if kind == CLIENT_ID else kind
                    raise QuotaError(f"Duplicate {which} filter component entity type")
            elif kind == "":
                raise QuotaError("Unexpected empty filter component entity type")
            else:
                raise QuotaError(f"Custom entity type '{kind}' not supported",
                                 "unsupported_version")  # fmt: skip
            if match_type == 0:
                if match is None:
                    raise QuotaError(f"Missing exact match for {kind}")  # ClientQuotaFilterComponent
            elif match_type in (1, 2):
                match = None
            else:
                raise QuotaError(f"Unexpected match type: {match_type}")
            wanted[kind] = (match_type, match)
        if "ip" in wanted:
            if USER in wanted or CLIENT_ID in wanted:
                raise QuotaError("Invalid entity filter component combination, IP filter "
                                 "component should not be used with user or clientId filter "
                                 "component.")  # fmt: skip
            return []  # strom keeps no IP quotas

        def matches(kind: str, stored: str | None) -> bool:
            rule = wanted.get(kind)
            if rule is None:
                return stored is None or not strict
            if stored is None:
                return False
            match_type, name = rule
            if match_type == 0:
                return stored != DEFAULT and desanitize(stored) == name
            if match_type == 1:
                return stored == DEFAULT
            return True

        out = [(e, dict(v)) for e, v in self.entities.items()
               if v and matches(USER, e.user) and matches(CLIENT_ID, e.client)]  # fmt: skip
        out.sort(key=lambda item: (item[0].user or "", item[0].client or ""))
        return out

    def quota_of(self, key: str, principal: str, client_id: str) -> float | None:
        """The bound in force for ``key`` for a principal and client id (None: unlimited)."""
        manager = self.managers.get(key)
        if manager is None:
            return None
        user = sanitize(user_name(principal))
        return manager.limit(manager.tags(user, client_id))


class QuotaExceeded(KafkaError):
    """A strict controller mutation quota refused a mutation (Kafka's
    ``ThrottlingQuotaExceededException``, with its message)."""

    error_code = ErrorCode.throttling_quota_exceeded

    def __init__(self, throttle_ms: int) -> None:
        super().__init__(message="The throttling quota has been exceeded.")
        self.throttle_ms = throttle_ms


class MutationQuota:
    """One request's ``controller_mutation_rate`` (KIP-599; Kafka's
    ``StrictControllerMutationQuota`` / ``PermissiveControllerMutationQuota``), for the
    (user, client id) that sent it. The permits are partitions: created by CreateTopics and
    CreatePartitions, deleted by DeleteTopics.

    ``strict`` (the request versions from KIP-599 on): a mutation is refused with
    :class:`QuotaExceeded` while the bucket is below zero, and taken in full (whatever it
    costs) while it is not; the answer is throttled only when something was refused.
    Permissive (older versions, whose clients know no THROTTLING_QUOTA_EXCEEDED): every
    mutation is taken, and the answer is throttled for what the bucket owes after it.

    The throttle time is the latest one given, less the time since (the request may have
    waited for its mutations): :meth:`throttle_ms` when answering. The connection counts it
    in the quota metrics when it mutes the client for it."""

    __slots__ = ("manager", "user", "client", "strict", "clock_ms", "_throttle_ms", "_at_ms")

    def __init__(self, manager: ClientQuotaManager, user: str, client: str, strict: bool,
                 clock_ms: Callable[[], int]) -> None:  # fmt: skip
        self.manager = manager
        self.user = user
        self.client = client
        self.strict = strict
        self.clock_ms = clock_ms
        self._throttle_ms = 0
        self._at_ms = 0

    def record(self, permits: float) -> None:
        """Take ``permits`` (partitions); raises :class:`QuotaExceeded` (strict only)."""
        manager = self.manager
        if not manager.enabled:
            return
        sensor = manager.sensor(self.user, self.client)
        if sensor is None or sensor.bucket is None:
            return
        now = self.clock_ms()
        bound = sensor.bound
        burst = bound * manager.burst_s
        bucket = sensor.bucket
        if self.strict:
            owed = bucket.refill(bound, burst, now)
            if owed < 0:
                self._given(bucket_throttle_ms(owed, bound), now)
                raise QuotaExceeded(self._throttle_ms)
        sensor.rate.record(permits, now)
        sensor.recorded += permits
        sensor.last_ms = now
        left = bucket.record(permits, bound, burst, now)
        if not self.strict and left < 0:
            self._given(bucket_throttle_ms(left, bound), now)

    def _given(self, ms: int, now: int) -> None:
        self._throttle_ms, self._at_ms = ms, now

    def throttle_ms(self) -> int:
        """The throttle time the answer carries (0: none)."""
        if self._throttle_ms <= 0:
            return 0
        return max(0, self._throttle_ms - (self.clock_ms() - self._at_ms))


def apply_ops(current: Mapping[str, object],
              ops: Iterable[tuple[str, float, bool]]) -> dict[str, object]:  # fmt: skip
    """A stored config map after an alteration's ops (key, value, remove): quota keys set as
    Kafka stores them, removed ones dropped, every other key (SCRAM credentials) kept.
    Raises :class:`QuotaError` before anything is changed."""
    out = dict(current)
    seen: set[str] = set()
    for key, value, remove in ops:
        if key in seen:
            raise QuotaError(f"Duplicate quota key {key} not updating quota for this entity")
        seen.add(key)
        if remove:
            if key not in QUOTA_KEYS:  # never another owner's key (SCRAM credentials)
                raise QuotaError(f"Invalid configuration key {key}")
            out.pop(key, None)
        else:
            out[key] = check_value(key, value)
    return out
