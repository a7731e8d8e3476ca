"""Dynamic broker configs, as ``kafka-configs.sh --entity-type brokers``: describe a broker's
configs (or the cluster-wide dynamic defaults), set and delete them (IncrementalAlterConfigs;
the broker applies them at once).

librdkafka cannot name the cluster default (a BROKER resource named ``""``), so the default's
two requests (DescribeConfigs, IncrementalAlterConfigs) go with strom's own codec
(:mod:`strom.admin.wire`) on one plain connection to the first bootstrap server.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from strom.admin import wire
from strom.admin.errors import InvalidInputError, NotFoundError, RefusedError
from strom.admin.session import Session
from strom.protocol.messages import build, request_class

SOURCES = {
    1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG",
}  # fmt: skip
SET_OP, DELETE_OP = 0, 1
BROKER_TYPE = 4  # ConfigResource.Type.BROKER on the wire
DESCRIBE_CONFIGS, ALTER_CONFIGS = 32, 44


@dataclass(frozen=True)
class BrokerConfig:
    name: str
    value: str | None
    source: str
    dynamic: bool  # changeable without a restart
    sensitive: bool


def source_name(source: Any) -> str:
    code = int(getattr(source, "value", source))
    return SOURCES.get(code, str(code))


def broker_resource(session: Session, broker: int | None) -> ConfigResource:
    """The BROKER resource of ``broker`` (None: the first live one); a broker not in the
    cluster is a :class:`NotFoundError` (the client would wait for a connection forever)."""
    brokers = sorted(session.metadata().brokers)
    if not brokers:
        raise NotFoundError(f"no broker is known at {session.bootstrap}")
    chosen = brokers[0] if broker is None else broker
    if chosen not in brokers:
        known = ", ".join(map(str, brokers))
        raise NotFoundError(f"broker {chosen} is not in the cluster (brokers: {known})")
    return ConfigResource(ResourceType.BROKER, str(chosen))


def _check(code: int, message: str | None, what: str) -> None:
    if code != 0:
        name = wire.error_name(code)
        raise RefusedError(f"{what}: {message or name} ({name})")


def describe(session: Session, broker: int | None = None, default: bool = False
             ) -> list[BrokerConfig]:  # fmt: skip
    """Every config of ``broker`` (None: the first live one), or with ``default`` the
    cluster-wide dynamic defaults; by name."""
    if default:
        return sorted(_describe_default(session), key=lambda c: c.name)
    resource = broker_resource(session, broker)
    futures = session.admin.describe_configs([resource], request_timeout=session.timeout)
    configs = session.wait(futures[resource], "cannot describe the broker's configs")
    return sorted((BrokerConfig(c.name, c.value, source_name(c.source), not c.is_read_only,
                                c.is_sensitive) for c in configs.values()),
                  key=lambda c: c.name)  # fmt: skip


def _describe_default(session: Session) -> list[BrokerConfig]:
    mod = __import__(request_class(DESCRIBE_CONFIGS, 4).__module__, fromlist=["x"])
    resource = build(mod.DescribeConfigsResource, resource_type=BROKER_TYPE, resource_name="",
                     configuration_keys=None)  # fmt: skip
    response = wire.request(session.bootstrap, DESCRIBE_CONFIGS, 4, wait_s=session.timeout,
                            resources=(resource,), include_synonyms=False,
                            include_documentation=False)  # fmt: skip
    [result] = response.results
    _check(result.error_code, result.error_message, "cannot describe the cluster default")
    return [BrokerConfig(c.name, c.value, source_name(c.config_source), not c.read_only,
                         c.is_sensitive) for c in result.configs]  # fmt: skip


def alter(session: Session, sets: dict[str, str], deletes: list[str], verb: str,
          broker: int | None = None, default: bool = False) -> str:  # fmt: skip
    """Set ``sets`` and remove ``deletes`` on ``broker`` (None: the first live one) or, with
    ``default``, the cluster-wide default; the target's name (``broker 1``, ``the cluster
    default``). ``verb`` names the change in the error."""
    names = [*sets, *deletes]
    if not names:
        raise InvalidInputError("nothing to change")
    if default:
        mod = __import__(request_class(ALTER_CONFIGS, 1).__module__, fromlist=["x"])
        configs = tuple([build(mod.AlterableConfig, name=n, config_operation=SET_OP, value=v)
                         for n, v in sets.items()]
                        + [build(mod.AlterableConfig, name=n, config_operation=DELETE_OP,
                                 value=None) for n in deletes])  # fmt: skip
        resource = build(mod.AlterConfigsResource, resource_type=BROKER_TYPE,
                         resource_name="", configs=configs)  # fmt: skip
        response = wire.request(session.bootstrap, ALTER_CONFIGS, 1, wait_s=session.timeout,
                                resources=(resource,), validate_only=False)  # fmt: skip
        [result] = response.responses
        _check(result.error_code, result.error_message, "cannot alter the cluster default")
        return "the cluster default"
    resource = broker_resource(session, broker)
    for n, v in sets.items():
        resource.add_incremental_config(
            ConfigEntry(n, v, incremental_operation=AlterConfigOpType.SET))
    for n in deletes:
        resource.add_incremental_config(
            ConfigEntry(n, None, incremental_operation=AlterConfigOpType.DELETE))
    futures = session.admin.incremental_alter_configs([resource],
                                                      request_timeout=session.timeout)
    target = f"broker {resource.name}"
    session.wait(futures[resource], f"cannot {verb} configs of {target}")
    return target
