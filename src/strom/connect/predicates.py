"""Predicates for conditional transforms (Kafka's KIP-585): TopicNameMatches, HasHeaderKey,
RecordIsTombstone, configured as ``predicates=p`` / ``predicates.p.type=...`` and used by
``transforms.<alias>.predicate=p`` (with ``transforms.<alias>.negate=true`` to invert).
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from typing import Any, ClassVar

from strom.connect.api import ConnectRecord
from strom.connect.config import ConfigDef, ConfigKey


class Predicate(ABC):
    CONFIG_DEF: ClassVar[ConfigDef] = ConfigDef()

    def __init__(self) -> None:
        self.config: dict[str, Any] = {}

    @classmethod
    def config_def(cls) -> ConfigDef:
        return cls.CONFIG_DEF

    def configure(self, props: dict[str, str]) -> None:
        self.config = self.config_def().parse(props)

    @abstractmethod
    def test(self, record: ConnectRecord) -> bool: ...


def _regex(value: Any) -> str | None:
    try:
        re.compile(value)
    except re.error as exc:
        return f"Invalid regex: {exc}"
    return None


class TopicNameMatches(Predicate):
    """True when the whole topic name matches ``pattern``."""

    CONFIG_DEF = ConfigDef([
        ConfigKey("pattern", "STRING", importance="MEDIUM",
                  documentation="A Java regular expression for matching against the name of "
                  "a record's topic.",
                  validator=lambda v: _regex(v) or (None if v else "String may not be empty")),
    ])

    def configure(self, props: dict[str, str]) -> None:
        super().configure(props)
        self.pattern = re.compile(self.config["pattern"])

    def test(self, record: ConnectRecord) -> bool:
        return self.pattern.fullmatch(record.topic) is not None


class HasHeaderKey(Predicate):
    """True when the record has at least one header named ``name``."""

    CONFIG_DEF = ConfigDef([
        ConfigKey("name", "STRING", importance="MEDIUM",
                  documentation="The header name.",
                  validator=lambda v: None if v else "String must be non-empty"),
    ])

    def test(self, record: ConnectRecord) -> bool:
        return any(k == self.config["name"] for k, _ in record.headers or ())


class RecordIsTombstone(Predicate):
    """True for a record whose value is null."""

    def test(self, record: ConnectRecord) -> bool:
        return record.value is None


PREDICATES: dict[str, type[Predicate]] = {
    f"org.apache.kafka.connect.transforms.predicates.{cls.__name__}": cls
    for cls in (TopicNameMatches, HasHeaderKey, RecordIsTombstone)
}
