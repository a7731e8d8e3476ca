"""Topic routing and filtering: RegexRouter, TimestampRouter, Filter (Kafka's names/keys).

RegexRouter's ``regex`` must match the whole topic (Java's ``Matcher.matches``) and its
``replacement`` uses Java's ``$1`` group references. TimestampRouter formats the record
timestamp in UTC with a Java pattern. Filter drops every record it is applied to: it is
meant to be used with a predicate.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from strom.connect.config import ConfigDef, ConfigKey
from strom.connect.converters import DataError
from strom.connect.datefmt import PatternError, format_ms, to_strftime
from strom.connect.transforms.base import R, Transformation


def _regex(value: Any) -> str | None:
    try:
        re.compile(value)
    except re.error as exc:
        return f"Invalid regex: {exc}"
    return None


def java_replacement(text: str) -> str:
    """A Java replacement string (``$1``, ``${name}``, ``\\$``) as a Python ``re.sub`` one."""
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            out.append(text[i + 1].replace("\\", "\\\\"))
            i += 2
        elif ch == "$" and i + 1 < len(text) and text[i + 1] == "{":
            end = text.index("}", i)
            out.append(f"\\g<{text[i + 2:end]}>")
            i = end + 1
        elif ch == "$":
            j = i + 1
            while j < len(text) and text[j].isdigit():
                j += 1
            if j == i + 1:
                raise ValueError(f"Illegal group reference in replacement {text!r}")
            out.append(f"\\g<{text[i + 1:j]}>")
            i = j
        else:
            out.append("\\\\" if ch == "\\" else ch)
            i += 1
    return "".join(out)


class RegexRouter(Transformation):
    """Rename the topic: ``regex`` (whole-topic match) and ``replacement``."""

    CONFIG_DEF = ConfigDef([
        ConfigKey("regex", "STRING", importance="HIGH",
                  documentation="Regular expression to use for matching.", validator=_regex),
        ConfigKey("replacement", "STRING", importance="HIGH",
                  documentation="Replacement string."),
    ])

    def validate_config(self) -> None:
        self.pattern = re.compile(self.config["regex"])
        self.replacement = java_replacement(self.config["replacement"])

    def apply(self, record: R) -> R | None:
        match = self.pattern.fullmatch(record.topic)
        if match is None:
            return record
        return dataclasses.replace(record, topic=match.expand(self.replacement))


def _pattern(value: Any) -> str | None:
    try:
        to_strftime(value)
    except PatternError as exc:
        return str(exc)
    return None


class TimestampRouter(Transformation):
    """Topic from ``topic.format`` with ``${topic}`` and ``${timestamp}`` (record time, UTC)."""

    CONFIG_DEF = ConfigDef([
        ConfigKey("topic.format", "STRING", "${topic}-${timestamp}", "HIGH",
                  "Format string which can contain ${topic} and ${timestamp} as placeholders "
                  "for the topic and timestamp, respectively."),
        ConfigKey("timestamp.format", "STRING", "yyyyMMdd", "HIGH",
                  "Format string for the timestamp that is compatible with "
                  "java.text.SimpleDateFormat.", validator=_pattern),
    ])

    def apply(self, record: R) -> R | None:
        if record.timestamp is None or record.timestamp < 0:
            raise DataError(f"Timestamp missing on record: {record.topic}")
        stamp = format_ms(self.config["timestamp.format"], record.timestamp)
        topic = (self.config["topic.format"].replace("${topic}", record.topic)
                 .replace("${timestamp}", stamp))
        return dataclasses.replace(record, topic=topic)


class Filter(Transformation):
    """Drops every record (use it with a predicate, e.g. to drop tombstones)."""

    def apply(self, record: R) -> R | None:
        return None
