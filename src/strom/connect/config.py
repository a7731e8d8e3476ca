"""Configuration definitions and their validation (Kafka's ConfigDef, feeding /validate).

A :class:`ConfigDef` lists keys with a type, a default (or none: the key is required), an
importance, documentation, a group and an optional validator. :meth:`ConfigDef.validate` never
raises: it returns one :class:`ConfigValue` per key with its error messages, the shape the
``PUT /connector-plugins/{type}/config/validate`` endpoint returns.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any


class _NoDefault:
    def __repr__(self) -> str:
        return "NO_DEFAULT"


NO_DEFAULT: Any = _NoDefault()
TYPES = ("STRING", "INT", "LONG", "DOUBLE", "BOOLEAN", "LIST", "CLASS", "PASSWORD")
#: A validator gets the parsed value and returns an error message or None.
Validator = Callable[[Any], "str | None"]


@dataclass(frozen=True)
class ConfigKey:
    name: str
    type: str = "STRING"
    default: Any = NO_DEFAULT
    importance: str = "MEDIUM"
    documentation: str = ""
    group: str | None = None
    validator: Validator | None = None
    order: int = -1

    @property
    def required(self) -> bool:
        return self.default is NO_DEFAULT

    def definition(self) -> dict[str, Any]:
        """The ``definition`` object of the validate endpoint."""
        default = None if self.required else _render(self.default)
        return {
            "name": self.name,
            "type": self.type,
            "required": self.required,
            "default_value": default,
            "importance": self.importance,
            "documentation": self.documentation,
            "group": self.group,
            "width": "NONE",
            "display_name": self.name,
            "dependents": [],
            "order": self.order,
        }


@dataclass
class ConfigValue:
    name: str
    value: Any
    errors: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "value": _render(self.value),
            "recommended_values": [],
            "errors": list(self.errors),
            "visible": True,
        }


def _render(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


def parse_value(key: ConfigKey, raw: Any) -> Any:
    """Parse a raw (string) value as Kafka does; ValueError with Kafka's wording if bad."""
    if raw is None:
        return None
    text = raw.strip() if isinstance(raw, str) else raw
    if key.type in ("INT", "LONG"):
        try:
            return int(text)
        except (TypeError, ValueError):
            raise ValueError(f"Invalid value {raw} for configuration {key.name}: "
                             "Not a number of type " + key.type) from None
    if key.type == "DOUBLE":
        try:
            return float(text)
        except (TypeError, ValueError):
            raise ValueError(f"Invalid value {raw} for configuration {key.name}: "
                             "Not a number of type DOUBLE") from None
    if key.type == "BOOLEAN":
        if isinstance(text, bool):
            return text
        if str(text).lower() in ("true", "false"):
            return str(text).lower() == "true"
        raise ValueError(f"Invalid value {raw} for configuration {key.name}: "
                         "Expected value to be either true or false")
    if key.type == "LIST":
        if isinstance(text, list):
            return text
        return [p.strip() for p in str(text).split(",") if p.strip()]
    return str(text)


def at_least(minimum: int) -> Validator:
    def check(value: Any) -> str | None:
        if value is not None and value < minimum:
            return f"Value must be at least {minimum}"
        return None

    return check


def valid_regex(value: Any) -> str | None:
    """Kafka's RegexValidator, in Python's ``re`` syntax (what the runtime matches with)."""
    try:
        re.compile(str(value or ""))
    except re.error as exc:
        return f"Invalid regex: {exc}"
    return None


def non_empty_string(value: Any) -> str | None:
    if value is not None and not str(value).strip():
        return "String may not be empty"
    return None


class ConfigDef:
    """An ordered set of :class:`ConfigKey` s."""

    def __init__(self, keys: Iterable[ConfigKey] = ()) -> None:
        self.keys: dict[str, ConfigKey] = {}
        for k in keys:
            self.define(k)

    def define(self, key: ConfigKey) -> ConfigDef:
        self.keys[key.name] = key
        return self

    def merged(self, other: ConfigDef) -> ConfigDef:
        return ConfigDef([*self.keys.values(), *other.keys.values()])

    def validate(self, props: dict[str, Any]) -> list[ConfigValue]:
        """One ConfigValue per key, with errors for missing required keys and bad values."""
        out: list[ConfigValue] = []
        for key in self.keys.values():
            raw = props.get(key.name)
            cv = ConfigValue(key.name, raw)
            if raw is None:
                if key.required:
                    cv.errors.append(f"Missing required configuration \"{key.name}\" "
                                     "which has no default value.")
                else:
                    cv.value = key.default
                out.append(cv)
                continue
            try:
                parsed = parse_value(key, raw)
            except ValueError as exc:
                cv.errors.append(str(exc))
                out.append(cv)
                continue
            if key.validator is not None:
                problem = key.validator(parsed)
                if problem:
                    cv.errors.append(f"Invalid value {raw} for configuration {key.name}: "
                                     f"{problem}")
            out.append(cv)
        return out

    def parse(self, props: dict[str, Any]) -> dict[str, Any]:
        """Parsed values with defaults; ValueError naming the first problem."""
        result: dict[str, Any] = {}
        for cv in self.validate(props):
            if cv.errors:
                raise ValueError(cv.errors[0])
            key = self.keys[cv.name]
            result[cv.name] = None if cv.value is None else parse_value(key, cv.value)
        return result
