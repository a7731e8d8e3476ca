"""The quota model (strom.security.quotas): Kafka's precedence, rate windows, throttle times,
the DescribeClientQuotas filter and the alteration checks."""

from __future__ import annotations

import pytest

from strom.protocol.errors import ErrorCode
from strom.security.quotas import (
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    DEFAULT,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    ClientQuotaManager,
    ClientQuotas,
    Entity,
    MutationQuota,
    QuotaError,
    QuotaExceeded,
    Rate,
    apply_ops,
    check_value,
    desanitize,
    entity_from_components,
    parse_configs,
    sanitize,
)

T0 = 1_000_000


def test_sanitize_is_kafkas() -> None:
    # Java's URLEncoder keeps a-zA-Z0-9.-_ (and *, which Kafka then encodes), space as %20
    assert sanitize("alice") == "alice"
    assert sanitize("CN=a b,O=x*") == "CN%3Da%20b%2CO%3Dx%2A"
    assert sanitize("<default>") == "%3Cdefault%3E" != DEFAULT
    assert sanitize("a~b") == "a%7Eb"
    assert desanitize(sanitize("CN=a b,O=x*/é")) == "CN=a b,O=x*/é"


def test_rate_is_kafkas_windowed_rate() -> None:
    rate = Rate(11, 1000)
    rate.record(1000, T0)
    # one sample only: the window is at least (samples - 1) whole windows = 10 s
    assert rate.window_size_ms(T0) == 10_000
    assert rate.measure(T0) == pytest.approx(100.0)
    for i in range(1, 30):  # 1000 bytes every second for 30 s
        rate.record(1000, T0 + i * 1000)
    # 11 windows kept (plus the overlapping one), the oldest started 11 s before
    assert rate.measure(T0 + 29_000) == pytest.approx(1000.0, rel=0.1)
    # 11 windows of silence: everything expired
    assert rate.measure(T0 + 29_000 + 11_000) == 0.0


def test_windowed_throttle_time_is_excess_over_bound_times_window() -> None:
    manager = ClientQuotaManager(REQUEST_PERCENTAGE, 11, 1)  # unbounded, to see the formula
    manager.set(Entity(None, "c"), 100.0)
    assert manager.record("ANONYMOUS", "c", 500, T0) == 0  # 500 B over 10 s: 50 B/s
    # 1500 B over the 10 s window: 150 B/s, 50 % above: half the window
    assert manager.record("ANONYMOUS", "c", 1000, T0) == 5000
    assert manager.record("ANONYMOUS", "other", 10**9, T0) == 0  # no quota: never throttled
    # request_percentage's throttle is bounded by one window (ClientRequestQuotaManager)
    request = ClientQuotas(11, 1).request
    request.set(Entity(None, DEFAULT), 1.0)
    assert request.record("u", "c", 5000.0, T0) == 1000


def test_byte_rates_are_throttled_by_a_token_bucket() -> None:
    q = ClientQuotas(3, 1)
    q.update(Entity(None, "c"), {PRODUCER_BYTE_RATE: 1000.0, CONSUMER_BYTE_RATE: 1000.0})
    # starts full: the burst is bound x samples x window = 3000 B
    assert q.produce.record("u", "c", 3000, T0) == 0
    assert q.produce.record("u", "c", 500, T0) == 500  # 500 B owed, refilled at 1000 B/s
    # a client that waits its throttle time and sends again owes exactly its request: a steady
    # pace at the bound, whatever the samples of the windowed rate do meanwhile
    now = T0 + 500
    for _ in range(50):
        ms = q.produce.record("u", "c", 250, now)
        assert ms == 250
        now += ms
    # the windowed rate is measured all along (the metric)
    sensor = q.produce.sensors[("", "c")]
    assert sensor.rate.measure(now) == pytest.approx(1000.0, rel=0.05)
    # a pause refills the bucket, up to the burst and no further
    assert q.produce.record("u", "c", 3000, now + 60_000) == 0
    assert q.produce.record("u", "c", 1, now + 60_000) == 1
    # a throttled Fetch taken back gives its credits back
    assert q.fetch.record("u", "c", 4000, T0) == 1000
    q.fetch.unrecord("u", "c", 4000, T0)
    assert q.fetch.record("u", "c", 3000, T0) == 0


class _Clock:
    def __init__(self) -> None:
        self.ms = T0

    def __call__(self) -> int:
        return self.ms


def test_strict_mutation_quota_refuses_once_exhausted_and_throttles_the_refusal() -> None:
    q = ClientQuotas(3, 1)
    q.update(Entity(None, "c"), {CONTROLLER_MUTATION_RATE: 2.0})  # a burst of 6 partitions
    clock = _Clock()
    quota = MutationQuota(q.mutation, "u", "c", True, clock)
    quota.record(4)
    quota.record(4)  # not exhausted before it: taken in full, 2 partitions owed
    assert quota.throttle_ms() == 0  # strict: nothing refused, no throttle
    with pytest.raises(QuotaExceeded) as refused:
        quota.record(1)
    assert refused.value.error_code == ErrorCode.throttling_quota_exceeded
    assert refused.value.throttle_ms == 1000  # 2 owed at 2 a second
    clock.ms += 400  # answered later: what is left of it
    assert quota.throttle_ms() == 600
    clock.ms += 600
    again = MutationQuota(q.mutation, "u", "c", True, clock)
    again.record(1)  # the bucket is back at zero: taken
    assert again.throttle_ms() == 0
    # another client id is measured on its own; no quota at all: never refused
    MutationQuota(q.mutation, "u", "d", True, clock).record(1000)
    q.update(Entity(None, "c"), {})
    MutationQuota(q.mutation, "u", "c", True, clock).record(1000)


def test_permissive_mutation_quota_takes_everything_and_throttles_the_answer() -> None:
    q = ClientQuotas(3, 1)
    q.update(Entity("u", None), {CONTROLLER_MUTATION_RATE: 2.0})
    clock = _Clock()
    quota = MutationQuota(q.mutation, "u", "c", False, clock)
    quota.record(6)
    assert quota.throttle_ms() == 0
    quota.record(4)
    assert quota.throttle_ms() == 2000  # 4 owed at 2 a second
    assert q.mutation.sensors[("u", "")].recorded == 10


def test_precedence_is_kafkas_order() -> None:
    m = ClientQuotaManager(PRODUCER_BYTE_RATE, 11, 1)
    entities = [
        (Entity(None, DEFAULT), 8.0), (Entity(None, "c"), 7.0), (Entity(DEFAULT, None), 6.0),
        (Entity(DEFAULT, DEFAULT), 5.0), (Entity(DEFAULT, "c"), 4.0), (Entity("u", None), 3.0),
        (Entity("u", DEFAULT), 2.0), (Entity("u", "c"), 1.0),
    ]  # fmt: skip
    expected_tags = [("", "c"), ("", "c"), ("u", ""), ("u", "c"), ("u", "c"), ("u", ""),
                     ("u", "c"), ("u", "c")]  # fmt: skip
    for (entity, bound), tags in zip(entities, expected_tags, strict=True):
        m.set(entity, bound)  # each more specific than all before it
        assert m.tags("u", "c") == tags
        assert m.limit(m.tags("u", "c")) == bound
    # others fall to what matches them
    assert m.limit(m.tags("v", "d")) == 5.0  # users/<default>/clients/<default>
    m.set(Entity(DEFAULT, DEFAULT), None)
    m.set(Entity(DEFAULT, "c"), None)
    assert m.tags("v", "d") == ("v", "") and m.limit(("v", "")) == 6.0
    m.set(Entity(DEFAULT, None), None)
    assert m.tags("v", "d") == ("", "d") and m.limit(("", "d")) == 8.0
    assert m.tags("v", "c") == ("", "c") and m.limit(("", "c")) == 7.0


def test_a_user_quota_is_shared_by_its_client_ids_a_default_is_per_name() -> None:
    m = ClientQuotaManager(PRODUCER_BYTE_RATE, 11, 1)
    m.set(Entity("u", None), 100.0)
    m.set(Entity(None, DEFAULT), 100.0)
    m.record("u", "a", 900, T0)
    assert m.record("u", "b", 200, T0) > 0  # users/u counts a and b together
    assert m.record("v", "a", 900, T0) == 0  # clients/<default>: client a of user v alone
    assert m.record("w", "b", 900, T0) == 0  # and client b alone
    assert m.record("w", "b", 200, T0) > 0


def test_quotas_resolve_each_key_on_its_own_and_active_follows_enforced_keys() -> None:
    q = ClientQuotas()
    assert not q.active
    q.update(Entity("u", None), {CONSUMER_BYTE_RATE: 10.0, "SCRAM-SHA-256": 1.0})
    q.update(Entity(None, "c"), {PRODUCER_BYTE_RATE: 20.0})
    assert q.active
    assert q.quota_of(PRODUCER_BYTE_RATE, "User:u", "c") == 20.0  # from clients/c
    assert q.quota_of(CONSUMER_BYTE_RATE, "User:u", "c") == 10.0  # from users/u
    assert q.get(Entity("u", None)) == {CONSUMER_BYTE_RATE: 10.0}
    q.update(Entity("u", None), {})
    q.update(Entity(None, "c"), {})
    assert not q.active and q.entities == {}
    q.update(Entity(None, "c"), {"controller_mutation_rate": 5.0})
    assert q.active  # the connection mutes for the throttle time of a mutation's answer
    assert q.quota_of("controller_mutation_rate", "User:u", "c") == 5.0


def test_changing_a_bound_applies_to_measurements_under_way() -> None:
    q = ClientQuotas()
    q.update(Entity(None, "c"), {PRODUCER_BYTE_RATE: 100.0})
    assert q.produce.record("ANONYMOUS", "c", 2000, T0) == 9000  # 900 B owed at 100 B/s
    q.update(Entity(None, "c"), {PRODUCER_BYTE_RATE: 10_000.0})
    assert q.produce.record("ANONYMOUS", "c", 1, T0) == 90  # the 901 B owed, at the new bound
    assert q.produce.record("ANONYMOUS", "c", 1, T0 + 100) == 0
    assert q.fetch.max_value_in_window("ANONYMOUS", "c") is None
    q.update(Entity(None, "c"), {CONSUMER_BYTE_RATE: 1000.0})
    assert q.fetch.max_value_in_window("ANONYMOUS", "c") == 10_000.0  # bound * (11 - 1) * 1 s


def _filtered(q: ClientQuotas, components: list[tuple[str, int, str | None]],
              strict: bool = False) -> list[list[tuple[str, str | None]]]:  # fmt: skip
    return [e.components() for e, _ in q.describe(components, strict)]


def test_describe_filters_as_kafka() -> None:
    q = ClientQuotas()
    for entity in (Entity("u", None), Entity("u", "c"), Entity(DEFAULT, None),
                   Entity(None, "c"), Entity(None, DEFAULT), Entity("v", DEFAULT)):  # fmt: skip
        q.update(entity, {PRODUCER_BYTE_RATE: 1.0})
    assert len(_filtered(q, [])) == 6
    assert _filtered(q, [], strict=True) == []
    assert _filtered(q, [("user", 0, "u")]) == [[("user", "u")], [("user", "u"), ("client-id", "c")]]
    assert _filtered(q, [("user", 0, "u")], strict=True) == [[("user", "u")]]
    assert _filtered(q, [("user", 1, None)], strict=True) == [[("user", None)]]
    assert _filtered(q, [("client-id", 1, None)]) == [[("client-id", None)],
                                                      [("user", "v"), ("client-id", None)]]  # fmt: skip
    assert _filtered(q, [("user", 2, None), ("client-id", 2, None)], strict=True) == [
        [("user", "u"), ("client-id", "c")], [("user", "v"), ("client-id", None)]]
    with pytest.raises(QuotaError, match="Duplicate user filter"):
        q.describe([("user", 2, None), ("user", 1, None)], False)
    with pytest.raises(QuotaError, match="Custom entity type 'x' not supported") as info:
        q.describe([("x", 2, None)], False)
    assert info.value.code == "unsupported_version"
    assert q.describe([("ip", 2, None)], False) == []
    with pytest.raises(QuotaError, match="IP filter component should not be used"):
        q.describe([("ip", 2, None), ("user", 2, None)], False)


def test_entities_and_values_checked_with_kafkas_messages() -> None:
    assert entity_from_components([("user", "a b"), ("client-id", None)]) == Entity("a%20b", DEFAULT)
    for components, message in (
        ([], "Invalid empty client quota entity"),
        ([("group", "g")], "Unhandled client quota entity type: group"),
        ([("user", "")], "Empty user not supported"),
        ([("ip", "1.2.3.4")], "IP quotas are not supported"),
    ):  # fmt: skip
        with pytest.raises(QuotaError, match=message):
            entity_from_components(components)
    assert check_value(PRODUCER_BYTE_RATE, 1024.0) == "1024"
    assert check_value(REQUEST_PERCENTAGE, 12.5) == "12.5"
    for key, value, message in (
        ("nope", 1.0, "Invalid configuration key nope"),
        (PRODUCER_BYTE_RATE, 0.0, "Quota producer_byte_rate must be greater than 0"),
        (CONSUMER_BYTE_RATE, 1.5, "consumer_byte_rate cannot be a fractional value."),
        (PRODUCER_BYTE_RATE, 1e30, "too large for a LONG"),
    ):  # fmt: skip
        with pytest.raises(QuotaError, match=message):
            check_value(key, value)


def test_alteration_keeps_keys_it_does_not_own() -> None:
    stored = {"SCRAM-SHA-256": "salt=...,stored_key=...", PRODUCER_BYTE_RATE: "10"}
    after = apply_ops(stored, [(PRODUCER_BYTE_RATE, 0, True), (CONSUMER_BYTE_RATE, 2048.0, False)])
    assert after == {"SCRAM-SHA-256": "salt=...,stored_key=...", CONSUMER_BYTE_RATE: "2048"}
    assert parse_configs(after) == {CONSUMER_BYTE_RATE: 2048.0}
    with pytest.raises(QuotaError, match="Invalid configuration key SCRAM-SHA-256"):
        apply_ops(stored, [("SCRAM-SHA-256", 0, True)])  # never removes another owner's key
    with pytest.raises(QuotaError, match="Duplicate quota key"):
        apply_ops(stored, [(PRODUCER_BYTE_RATE, 1.0, False), (PRODUCER_BYTE_RATE, 2.0, False)])
