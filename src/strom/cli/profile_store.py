"""Saved broker addresses (``strom profile``), as ``rpk profile`` keeps them.

Profiles live in ``$XDG_CONFIG_HOME/strom/profiles.toml`` (``~/.config/strom/profiles.toml``
when XDG_CONFIG_HOME is unset)::

    current = "prod"

    [profiles.prod]
    brokers = "kafka1:9092,kafka2:9092"
    timeout = 5.0                          # optional, seconds

    [profiles.prod.properties]             # optional: client properties (-X), e.g. security
    "security.protocol" = "SSL"
    "ssl.ca.location" = "/etc/strom/ca.crt"

The file is rewritten whole (temp file + rename) on every change, so a crash leaves either the
old or the new file; it is written with mode 0600 (properties may hold ``sasl.password``).
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from strom.cli.errors import CliError


@dataclass(frozen=True)
class Profile:
    name: str
    brokers: str
    timeout: float | None = None
    properties: Mapping[str, str] = field(default_factory=dict)


def config_dir() -> Path:
    """The user's strom config directory (XDG base directory rules)."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "strom"


def profiles_file() -> Path:
    return config_dir() / "profiles.toml"


def load() -> tuple[str | None, dict[str, Profile]]:
    """(current profile name, profiles by name); empty when there is no file yet."""
    path = profiles_file()
    try:
        doc = tomllib.loads(path.read_text())
    except FileNotFoundError:
        return None, {}
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise CliError(f"cannot read profiles from {path}: {exc}") from None
    profiles: dict[str, Profile] = {}
    for name, body in (doc.get("profiles") or {}).items():
        if not isinstance(body, dict):
            raise CliError(f"{path}: [profiles.{name}] must be a table")
        raw_timeout = body.get("timeout")
        properties = body.get("properties") or {}
        if not isinstance(properties, dict):
            raise CliError(f"{path}: [profiles.{name}.properties] must be a table")
        profiles[name] = Profile(
            name, str(body.get("brokers", "")), float(raw_timeout) if raw_timeout else None,
            {str(k): str(v) for k, v in properties.items()},
        )
    current = doc.get("current")
    return (str(current) if current else None), profiles


def save(current: str | None, profiles: dict[str, Profile]) -> None:
    """Write the whole file atomically."""
    lines = []
    if current:
        lines += [f"current = {json.dumps(current)}", ""]
    for p in profiles.values():
        lines.append(f"[profiles.{json.dumps(p.name)}]")
        lines.append(f"brokers = {json.dumps(p.brokers)}")
        if p.timeout is not None:
            lines.append(f"timeout = {float(p.timeout)!r}")
        lines.append("")
        if p.properties:
            lines.append(f"[profiles.{json.dumps(p.name)}.properties]")
            lines += [f"{json.dumps(k)} = {json.dumps(v)}" for k, v in p.properties.items()]
            lines.append("")
    path = profiles_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".toml.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write("\n".join(lines))
        os.replace(tmp, path)
    except OSError as exc:
        raise CliError(f"cannot write {path}: {exc.strerror or exc}") from None


def current_profile(name: str | None = None) -> Profile | None:
    """The profile named ``name`` (``--profile``; must exist) or the current one, if any."""
    current, profiles = load()
    if name:
        if name not in profiles:
            raise CliError(f"no profile named {name!r} (see 'strom profile list')")
        return profiles[name]
    return profiles.get(current) if current else None
