"""Kafka's config catalogue (strom.kafka_configs): its data, value checks, and what the broker
makes of it (dynamic, applied, accepted without effect), against docs/configs.md."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from strom import kafka_configs as kc
from strom.broker import broker_config_defs as defs
from strom.broker import config_resources as cr
from strom.config import known_keys

DOC = Path(__file__).resolve().parents[2] / "docs" / "configs.md"
TYPES = {"boolean", "string", "int", "short", "long", "double", "list", "class", "password"}


def test_the_catalogue_is_one_kafka_release() -> None:
    assert re.fullmatch(r"4\.\d+\.\d+", kc.RELEASE)
    assert len(kc.BROKER) > 300 and len(kc.TOPIC) > 30
    for d in [*kc.BROKER.values(), *kc.TOPIC.values()]:
        assert d.type in TYPES, d
        assert d.update_mode in (kc.READ_ONLY, kc.PER_BROKER, kc.CLUSTER_WIDE), d
        assert d.doc or d.internal, d.name
    # a few facts of Kafka 4.x, as its own definitions state them
    relogin = kc.BROKER["sasl.kerberos.min.time.before.relogin"]
    assert (relogin.type, relogin.default, relogin.update_mode) == ("long", "60000", "per-broker")
    assert kc.BROKER["log.retention.ms"].update_mode == "cluster-wide"
    assert kc.BROKER["log.retention.hours"].update_mode == "read-only"
    assert kc.BROKER["num.partitions"].update_mode == "read-only"
    assert kc.BROKER["leader.replication.throttled.rate"].update_mode == "cluster-wide"
    assert kc.TOPIC["retention.ms"].broker_synonyms == (
        "log.retention.ms", "log.retention.minutes", "log.retention.hours")


def test_every_kafka_default_passes_its_own_check() -> None:
    for d in [*kc.BROKER.values(), *kc.TOPIC.values()]:
        if d.default is not None:
            kc.check_value(d, d.default)


@pytest.mark.parametrize(("name", "value", "message"), [
    ("num.io.threads", "0", "Value must be at least 1"),
    ("num.io.threads", "x", "Not a number of type INT"),
    ("num.io.threads", "2147483648", "Not a number of type INT"),
    ("log.cleaner.threads", "-1", "Value must be at least 0"),
    ("auto.create.topics.enable", "yes", "Expected value to be either true or false"),
    ("compression.type", "brotli", "String must be one of: uncompressed"),
    ("log.cleanup.policy", "delete,shred", "String must be one of: compact, delete"),
])  # fmt: skip
def test_values_are_checked_as_kafka_checks_them(name: str, value: str, message: str) -> None:
    with pytest.raises(kc.ConfigValueError) as info:
        kc.check_value(kc.BROKER[name], value)
    assert str(info.value).startswith(f"Invalid value {value} for configuration {name}: ")
    assert message in str(info.value)


def test_valid_values_pass() -> None:
    assert kc.check_value(kc.BROKER["num.io.threads"], " 16 ") == 16
    assert kc.check_value(kc.BROKER["log.cleanup.policy"], "compact,delete") == ["compact", "delete"]
    assert kc.check_value(kc.BROKER["auto.create.topics.enable"], "FALSE") is False
    assert kc.check_value(kc.TOPIC["compression.zstd.level"], "-5") == -5


def test_the_broker_knows_every_kafka_name_and_refuses_what_kafka_refuses() -> None:
    assert set(kc.BROKER) <= set(defs.BROKER_CONFIGS)
    assert {n for n, d in kc.BROKER.items() if d.dynamic} <= defs.DYNAMIC_CONFIGS
    # strom's own dynamic names: the broker synonyms of its topic configs Kafka 4 dropped
    assert defs.DYNAMIC_CONFIGS - {n for n, d in kc.BROKER.items() if d.dynamic} == {
        "log.message.timestamp.difference.max.ms"}
    assert defs.APPLIED <= defs.DYNAMIC_CONFIGS
    assert "sasl.kerberos.min.time.before.relogin" in defs.NO_EFFECT & defs.PER_BROKER_ONLY
    assert "log.retention.ms" in defs.APPLIED and "log.retention.hours" not in defs.DYNAMIC_CONFIGS
    assert not any(defs.BROKER_CONFIGS[n].internal for n in defs.DESCRIBED)


def _listed(section: str) -> set[str]:
    text = DOC.read_text()
    body = text.split(section, 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^- `([^`]+)`$", body, re.M))


def test_docs_list_what_is_accepted_without_effect() -> None:
    text = DOC.read_text()
    assert f"Kafka {kc.RELEASE}" in text
    at_start = defs.NO_EFFECT & known_keys()
    assert _listed("## Accepted, stored and described, applied from the next start") == at_start
    assert _listed("## Accepted, stored and described, without effect in strom") == (
        defs.NO_EFFECT - at_start)
    assert _listed("## Topic configs accepted without effect") == set(cr.KAFKA_ONLY_TOPIC_CONFIGS)
    from strom.broker import group_configs as gc

    assert _listed("## Group configs in effect") == gc.APPLIED
    assert _listed("## Group configs accepted without effect") == set(kc.GROUP) - gc.APPLIED


def test_group_configs_are_checked_as_kafka_checks_them() -> None:
    from strom.broker import group_configs as gc
    from strom.storage.errors import InvalidConfigError

    gc.validate({"consumer.session.timeout.ms": "50000", "share.isolation.level": "read_committed"},
                {})  # fmt: skip
    refused = [({"no.such": "1"}, "Unknown group config name"),
               ({"consumer.session.timeout.ms": "1000"},
                "must be greater than or equal to group.consumer.min.session.timeout.ms"),
               ({"consumer.session.timeout.ms": "70000"},
                "must be less than or equal to group.consumer.max.session.timeout.ms"),
               ({"share.isolation.level": "dirty"}, "String must be one of")]  # fmt: skip
    for configs, why in refused:
        with pytest.raises(InvalidConfigError, match=why):
            gc.validate(configs, {})
    # the broker's bounds as configured
    gc.validate({"consumer.session.timeout.ms": "1000"},
                {"group.consumer.min.session.timeout.ms": "500"})
