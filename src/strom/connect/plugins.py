"""Finding connector and converter classes by the names users write in their configs.

A connector is found by its Kafka class name (``org.apache.kafka.connect.file.
FileStreamSourceConnector``), its simple name (``FileStreamSourceConnector``), the simple name
without the ``Connector`` suffix (``FileStreamSource``, Kafka's alias), an entry point name in
the ``strom.connectors`` group (third-party connectors), or a ``package.module.Class`` path.
Converters likewise, with ``strom.converters`` as their entry-point group.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Any

from strom.connect.api import Connector
from strom.connect.converters import (
    ByteArrayConverter,
    Converter,
    JsonConverter,
    StringConverter,
)
from strom.connect.file import FileStreamSinkConnector, FileStreamSourceConnector
from strom.connect.jdbc import JdbcSinkConnector, JdbcSourceConnector
from strom.connect.parquet import ParquetSinkConnector
from strom.connect.predicates import PREDICATES
from strom.connect.transforms import TRANSFORMS

CONNECTOR_GROUP = "strom.connectors"
CONVERTER_GROUP = "strom.converters"

#: Kafka class name -> class, for what strom ships.
BUILTIN_CONNECTORS: dict[str, type[Connector]] = {
    "org.apache.kafka.connect.file.FileStreamSourceConnector": FileStreamSourceConnector,
    "org.apache.kafka.connect.file.FileStreamSinkConnector": FileStreamSinkConnector,
    "io.confluent.connect.jdbc.JdbcSourceConnector": JdbcSourceConnector,
    "io.confluent.connect.jdbc.JdbcSinkConnector": JdbcSinkConnector,
    "strom.connect.parquet.ParquetSinkConnector": ParquetSinkConnector,
}
BUILTIN_CONVERTERS: dict[str, type[Converter]] = {
    "org.apache.kafka.connect.json.JsonConverter": JsonConverter,
    "org.apache.kafka.connect.storage.StringConverter": StringConverter,
    "org.apache.kafka.connect.converters.ByteArrayConverter": ByteArrayConverter,
}


class PluginNotFound(LookupError):
    pass


def _aliases(full_name: str) -> list[str]:
    simple = full_name.rsplit(".", 1)[-1]
    names = [full_name, simple]
    for suffix in ("Connector", "Converter"):
        if simple.endswith(suffix) and simple != suffix:
            names.append(simple[: -len(suffix)])
    return names


def _entry_points(group: str) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for ep in entry_points(group=group):
        found[ep.name] = ep
    return found


def connector_classes() -> dict[str, type[Connector]]:
    """Every known connector by its class name (built-ins first, then entry points)."""
    result = dict(BUILTIN_CONNECTORS)
    for name, ep in _entry_points(CONNECTOR_GROUP).items():
        try:
            cls = ep.load()
        except Exception:  # noqa: BLE001 - a broken plugin must not take the worker down
            continue
        if isinstance(cls, type) and issubclass(cls, Connector):
            result[f"{cls.__module__}.{cls.__qualname__}"] = cls
            result.setdefault(name, cls)
    return result


def _resolve(name: str, known: dict[str, Any], base: type, group: str) -> Any:
    name = name.strip()
    for full, cls in known.items():
        if name in _aliases(full):
            return cls
    eps = _entry_points(group)
    if name in eps:
        cls = eps[name].load()
        if isinstance(cls, type) and issubclass(cls, base):
            return cls
    if "." in name:
        module, _, attr = name.rpartition(".")
        try:
            cls = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError, ValueError):
            cls = None
        if isinstance(cls, type) and issubclass(cls, base):
            return cls
    kind = "Connector" if base is Connector else "Converter"
    raise PluginNotFound(
        f"Failed to find any class that implements {kind} and which name matches {name}"
    )


def find_connector(name: str) -> type[Connector]:
    cls: type[Connector] = _resolve(name, connector_classes(), Connector, CONNECTOR_GROUP)
    return cls


def find_converter(name: str) -> type[Converter]:
    cls: type[Converter] = _resolve(name, dict(BUILTIN_CONVERTERS), Converter, CONVERTER_GROUP)
    return cls


def class_name(cls: type) -> str:
    """The name shown in the REST API (Kafka's class name for the built-ins)."""
    for table in (BUILTIN_CONNECTORS, BUILTIN_CONVERTERS):
        for full, known in table.items():
            if known is cls:
                return full
    return f"{cls.__module__}.{cls.__qualname__}"


def plugin_list(connectors_only: bool = True) -> list[dict[str, str]]:
    """``GET /connector-plugins``: class, type and version of each plugin."""
    seen: set[type] = set()
    out: list[dict[str, str]] = []
    for cls in connector_classes().values():
        if cls in seen:
            continue
        seen.add(cls)
        out.append({"class": class_name(cls), "type": cls.connector_type,
                    "version": cls.version()})
    if not connectors_only:
        for full in BUILTIN_CONVERTERS:
            out.append({"class": full, "type": "converter", "version": "0.1.0"})
        out += [{"class": full, "type": "transformation", "version": "0.1.0"}
                for full in TRANSFORMS]
        out += [{"class": full, "type": "predicate", "version": "0.1.0"} for full in PREDICATES]
    return out
