"""The configured transformation chain of a connector, and its validation.

``transforms=a,b`` applies ``a`` then ``b``; a stage with ``transforms.a.predicate=p`` runs only
on records for which predicate ``p`` (``predicates=p``, ``predicates.p.type=...``) holds, or
does not hold with ``transforms.a.negate=true``. A stage that returns None drops the record and
the rest of the chain is skipped (Kafka's TransformationChain).

:func:`definitions` builds the extra :class:`ConfigDef` a connector's validation needs for
these keys (each transform's own keys under ``transforms.<alias>.``, in group
``Transforms: <alias>``), plus the cross-key errors that a per-key check cannot see.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from strom.connect.api import ConnectRecord
from strom.connect.config import ConfigDef, ConfigKey
from strom.connect.predicates import PREDICATES, Predicate
from strom.connect.transforms import find_transformation, transformation_name
from strom.connect.transforms.base import R, Transformation

#: (stage, class name, operation) -> result: how the runtime's error handler wraps each step.
Runner = Callable[[str, str, Callable[[], Any]], Any]


def find_predicate(name: str) -> type[Predicate]:
    name = name.strip()
    for full, cls in PREDICATES.items():
        if name in (full, full.rsplit(".", 1)[-1]):
            return cls
    raise LookupError(f"Class {name} could not be found.")


@dataclasses.dataclass
class Stage:
    alias: str
    transform: Transformation
    class_name: str
    predicate: Predicate | None = None
    negate: bool = False

    def apply(self, record: R) -> R | None:
        if self.predicate is not None and self.predicate.test(record) == self.negate:
            return record
        return self.transform.apply(record)


class TransformationChain:
    def __init__(self, stages: list[Stage]) -> None:
        self.stages = stages

    def apply(self, record: R, run: Runner | None = None) -> R | None:
        current: R | None = record
        for stage in self.stages:
            assert current is not None
            rec: R = current
            if run is None:
                current = stage.apply(rec)
            else:
                current = run("TRANSFORMATION", stage.class_name,
                              lambda s=stage, r=rec: s.apply(r))  # type: ignore[misc]
            if current is None:
                return None
        return current

    def close(self) -> None:
        for stage in self.stages:
            stage.transform.close()


def _sub(config: dict[str, str], prefix: str) -> dict[str, str]:
    return {k[len(prefix):]: v for k, v in config.items() if k.startswith(prefix)}


def _aliases(config: dict[str, str], key: str) -> list[str]:
    return [a.strip() for a in config.get(key, "").split(",") if a.strip()]


def build_chain(config: dict[str, str]) -> TransformationChain:
    """The chain of a (validated) connector config; ValueError/LookupError if it is bad."""
    predicates: dict[str, Predicate] = {}
    for alias in _aliases(config, "predicates"):
        pred = find_predicate(config.get(f"predicates.{alias}.type", ""))()
        pred.configure(_sub(config, f"predicates.{alias}."))
        predicates[alias] = pred
    stages = []
    for alias in _aliases(config, "transforms"):
        cls = find_transformation(config.get(f"transforms.{alias}.type", ""))
        transform = cls()
        transform.configure(_sub(config, f"transforms.{alias}."))
        pred_alias = config.get(f"transforms.{alias}.predicate", "").strip()
        if pred_alias and pred_alias not in predicates:
            raise ValueError(f"transforms.{alias}.predicate: unknown predicate {pred_alias}")
        negate = config.get(f"transforms.{alias}.negate", "false").strip().lower() == "true"
        stages.append(Stage(alias, transform, transformation_name(cls),
                            predicates.get(pred_alias), negate))
    return TransformationChain(stages)


def _prefixed(definition: ConfigDef, prefix: str, group: str) -> list[ConfigKey]:
    return [dataclasses.replace(k, name=prefix + k.name, group=group)
            for k in definition.keys.values()]


def _plugin_keys(config: dict[str, str], kind: str, errors: dict[str, list[str]]
                 ) -> list[ConfigKey]:
    """Keys of every alias in ``transforms`` / ``predicates``, their own keys included."""
    keys: list[ConfigKey] = []
    aliases = _aliases(config, kind)
    if len(set(aliases)) != len(aliases):
        errors.setdefault(kind, []).append(f"Duplicate alias provided in {kind}.")
    finder = find_transformation if kind == "transforms" else find_predicate
    label = "Transforms" if kind == "transforms" else "Predicates"
    for alias in dict.fromkeys(aliases):
        prefix, group = f"{kind}.{alias}.", f"{label}: {alias}"
        type_key = prefix + "type"
        keys.append(ConfigKey(type_key, "CLASS", importance="HIGH", group=group,
                              documentation=f"Class for the '{alias}' {kind[:-1]}."))
        if kind == "transforms":
            keys.append(ConfigKey(prefix + "predicate", "STRING", None, "MEDIUM",
                                  "The alias of a predicate used to determine whether to "
                                  "apply this transformation.", group=group))
            keys.append(ConfigKey(prefix + "negate", "BOOLEAN", False, "MEDIUM",
                                  "Whether the configured predicate should be negated.",
                                  group=group))
        if not config.get(type_key, "").strip():
            continue
        try:
            cls: Any = finder(config[type_key])
        except LookupError as exc:
            errors.setdefault(type_key, []).append(
                f"Invalid value {config[type_key]} for configuration {type_key}: {exc}")
            continue
        own = cls.config_def()
        keys.extend(_prefixed(own, prefix, group))
        sub = _sub(config, prefix)
        if not any(v.errors for v in own.validate(sub)):
            try:
                cls().configure(sub)
            except (ValueError, LookupError) as exc:
                errors.setdefault(type_key, []).append(str(exc))
    return keys


def definitions(config: dict[str, str]) -> tuple[ConfigDef, dict[str, list[str]]]:
    """(keys for ``transforms``/``predicates`` and every alias, cross-key errors by key)."""
    errors: dict[str, list[str]] = {}
    keys = [ConfigKey("transforms", "LIST", [], "LOW", "Aliases for the transformations to "
                      "be applied to records.", group="Transforms"),
            ConfigKey("predicates", "LIST", [], "LOW", "Aliases for the predicates used by "
                      "transformations.", group="Predicates")]
    keys += _plugin_keys(config, "transforms", errors)
    keys += _plugin_keys(config, "predicates", errors)
    defined = set(_aliases(config, "predicates"))
    for alias in _aliases(config, "transforms"):
        key = f"transforms.{alias}.predicate"
        wanted = config.get(key, "").strip()
        if wanted and wanted not in defined:
            errors.setdefault(key, []).append(
                f"Invalid value {wanted} for configuration {key}: this predicate alias is not "
                "listed in 'predicates'")
    return ConfigDef(keys), errors


__all__ = ["ConnectRecord", "Stage", "TransformationChain", "build_chain", "definitions"]
