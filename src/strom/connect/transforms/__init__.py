"""Kafka Connect's single-message transforms, by the class names connector configs use.

``transforms.<alias>.type`` accepts Kafka's class name
(``org.apache.kafka.connect.transforms.InsertField$Value``), the short form
(``InsertField$Value``), a name registered under the ``strom.transforms`` entry-point group,
or a ``package.module.Class`` path to a :class:`Transformation` subclass.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from strom.connect.transforms.base import KeyOrValue, Transformation
from strom.connect.transforms.cast import (
    CastKey,
    CastValue,
    TimestampConverterKey,
    TimestampConverterValue,
)
from strom.connect.transforms.fields import (
    ExtractFieldKey,
    ExtractFieldValue,
    HoistFieldKey,
    HoistFieldValue,
    InsertFieldKey,
    InsertFieldValue,
    MaskFieldKey,
    MaskFieldValue,
    ReplaceFieldKey,
    ReplaceFieldValue,
    ValueToKey,
)
from strom.connect.transforms.routing import Filter, RegexRouter, TimestampRouter

KAFKA_PACKAGE = "org.apache.kafka.connect.transforms."
TRANSFORM_GROUP = "strom.transforms"

TRANSFORMS: dict[str, type[Transformation]] = {
    KAFKA_PACKAGE + cls.__name__: cls for cls in (
        InsertFieldKey, InsertFieldValue, ReplaceFieldKey, ReplaceFieldValue, ExtractFieldKey,
        ExtractFieldValue, HoistFieldKey, HoistFieldValue, MaskFieldKey, MaskFieldValue,
        CastKey, CastValue, TimestampConverterKey, TimestampConverterValue, ValueToKey,
        RegexRouter, TimestampRouter, Filter)
}


def find_transformation(name: str) -> type[Transformation]:
    """The class for a ``transforms.<alias>.type`` value; LookupError with Kafka's wording."""
    name = name.strip()
    for full, cls in TRANSFORMS.items():
        if name in (full, full[len(KAFKA_PACKAGE):]):
            return cls
    for ep in entry_points(group=TRANSFORM_GROUP):
        if ep.name == name:
            found = ep.load()
            if isinstance(found, type) and issubclass(found, Transformation):
                return found
    if "." in name:
        module, _, attr = name.rpartition(".")
        try:
            found = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError, ValueError):
            found = None
        if isinstance(found, type) and issubclass(found, Transformation):
            return found
    raise LookupError(f"Class {name} could not be found.")


def transformation_name(cls: type[Transformation]) -> str:
    for full, known in TRANSFORMS.items():
        if known is cls:
            return full
    return f"{cls.__module__}.{cls.__qualname__}"


__all__ = ["TRANSFORMS", "KeyOrValue", "Transformation", "find_transformation",
           "transformation_name"]
