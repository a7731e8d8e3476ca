"""Validation of a connector's configuration: the ``/config/validate`` answer and the 400 a
create/update with an invalid configuration gets (Kafka's ``AbstractHerder.validateConnectorConfig``).

What is checked: the common connector keys, ``topics``/``topics.regex`` of a sink (exactly one
of them), the exactly-once keys of a source (:mod:`strom.connect.eos`), the connector's own
:meth:`~strom.connect.api.Connector.config_def`, ``transforms.*``/``predicates.*`` and
``errors.*`` (Kafka's ``ConnectorConfig.enrich``), the converters named, and the connector's
own ``validate()`` (a connector whose ``validate()`` raises gets a validation error, never a 500).
"""

from __future__ import annotations

from typing import Any

from strom.connect import eos
from strom.connect import errors as errors_api
from strom.connect.api import SinkConnector, SourceConnector
from strom.connect.config import ConfigDef, ConfigKey, at_least, non_empty_string, valid_regex
from strom.connect.plugins import PluginNotFound, class_name, find_connector, find_converter
from strom.connect.rest_error import RestError
from strom.connect.transforms import chain as transform_chain

COMMON_DEF = ConfigDef([
    ConfigKey("name", "STRING", importance="HIGH", group="Common",
              documentation="Globally unique name to use for this connector.",
              validator=non_empty_string),
    ConfigKey("connector.class", "STRING", importance="HIGH", group="Common",
              documentation="Name or alias of the class for this connector."),
    ConfigKey("tasks.max", "INT", 1, "HIGH", "Maximum number of tasks to use for this "
              "connector.", group="Common", validator=at_least(1)),
    ConfigKey("key.converter", "CLASS", None, "LOW", "Key converter (worker's by default).",
              group="Common"),
    ConfigKey("value.converter", "CLASS", None, "LOW", "Value converter (worker's by "
              "default).", group="Common"),
])
SINK_DEF = ConfigDef([
    ConfigKey("topics", "LIST", "", "HIGH", "List of topics to consume.", group="Common"),
    ConfigKey("topics.regex", "STRING", "", "HIGH", "Regular expression of topics to consume.",
              group="Common", validator=valid_regex),
])


def validate_connector_config(config: dict[str, str], eos_mode: str) -> dict[str, Any]:
    """The body of ``/config/validate`` (Kafka's ConfigInfos) for a worker whose
    ``exactly.once.source.support`` is ``eos_mode``."""
    name = config.get("connector.class")
    if not name:
        raise RestError(400, "Connector config " + str(config) + " contains no connector "
                             "type")
    try:
        cls = find_connector(name)
    except PluginNotFound as exc:
        raise RestError(400, str(exc)) from None
    definition = COMMON_DEF
    if issubclass(cls, SinkConnector):
        definition = definition.merged(SINK_DEF)
    elif issubclass(cls, SourceConnector):
        definition = definition.merged(eos.SOURCE_DEF)
    definition = definition.merged(cls.config_def())
    # transforms.*, predicates.* and errors.*: Kafka's ConnectorConfig.enrich
    chain_def, cross = transform_chain.definitions(config)
    errors_def, errors_cross = errors_api.definitions(config, issubclass(cls, SinkConnector))
    definition = definition.merged(chain_def).merged(errors_def)
    values = definition.validate(config)
    by_name = {v.name: v for v in values}
    for key, problems in [*cross.items(), *errors_cross.items()]:
        by_name[key].errors.extend(problems)
    if issubclass(cls, SinkConnector):
        has_topics = bool(config.get("topics", "").strip())
        has_regex = bool(config.get("topics.regex", "").strip())
        if has_topics == has_regex:
            msg = ("Must configure one of topics or topics.regex" if not has_topics else
                   "topics and topics.regex are mutually exclusive options, but both are "
                   "set.")
            by_name["topics"].errors.append(msg)
            by_name["topics.regex"].errors.append(msg)
    for key in ("key.converter", "value.converter"):
        if config.get(key):
            try:
                find_converter(config[key])
            except PluginNotFound as exc:
                by_name[key].errors.append(str(exc))
    try:
        instance = cls()
        extra = instance.validate(dict(config))
        if isinstance(instance, SourceConnector):
            for key, problems in eos.validate_source(instance, config, eos_mode).items():
                extra.setdefault(key, []).extend(problems)
    except Exception as exc:  # noqa: BLE001 - a connector's bug is a validation error
        extra = {"connector.class": [f"validate() failed: {exc}"]}
    for key, errors in extra.items():
        if key in by_name:
            by_name[key].errors.extend(errors)
    groups = []
    for k in definition.keys.values():
        if k.group and k.group not in groups:
            groups.append(k.group)
    return {
        "name": class_name(cls),
        "error_count": sum(len(v.errors) for v in values),
        "groups": groups,
        "configs": [{"definition": definition.keys[v.name].definition(),
                     "value": v.as_json()} for v in values],
    }


def checked_connector_config(name: str, config: dict[str, Any], eos_mode: str
                             ) -> dict[str, str]:
    """What a create or update of connector ``name`` stores (both worker modes): every value
    as a string, ``name`` set; 400 if the body names another connector, or if the
    configuration does not validate (:func:`check_connector_config`)."""
    checked = {str(k): str(v) for k, v in config.items()}
    if checked.get("name", name) != name:
        raise RestError(400, f"Connector name configuration ({checked['name']}) doesn't "
                             f"match connector name in the URL ({name})")
    checked["name"] = name
    check_connector_config(validate_connector_config(checked, eos_mode))
    return checked


def check_connector_config(result: dict[str, Any]) -> None:
    """Raise 400 (Kafka's message, every error listed) when ``result`` (the answer of
    :func:`validate_connector_config`) has errors."""
    if result["error_count"]:
        lines = [f"{c['value']['name']}: {'; '.join(c['value']['errors'])}"
                 for c in result["configs"] if c["value"]["errors"]]
        raise RestError(400, (
            f"Connector configuration is invalid and contains the following "
            f"{result['error_count']} error(s):\n" + "\n".join(lines) + "\nYou can also "
            "find the above list of errors at the endpoint "
            "`/connector-plugins/{connectorType}/config/validate`"))
