"""Worker properties common to both worker modes: parsing, the REST address, required keys.

Java ``.properties`` files as Kafka reads them. Required in both modes, as Kafka's
``WorkerConfig``: ``key.converter`` and ``value.converter`` (no default: a worker that would
silently pick a converter turns plain-text records into task failures), each naming a known
converter. Each problem is one :class:`WorkerConfigError` line, raised before anything starts.
"""

from __future__ import annotations

import socket
from urllib.parse import urlparse

from strom.connect.plugins import PluginNotFound, find_converter

DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 8083
#: Worker keys with no default (besides each mode's own: offsets file, group and topics).
CONVERTER_KEYS = ("key.converter", "value.converter")


class WorkerConfigError(ValueError):
    pass


def parse_properties(text: str) -> dict[str, str]:
    """Java ``.properties``: ``k=v`` / ``k: v`` / ``k v``, ``#``/``!`` comments, ``\\``
    continuation lines, ``\\`` escapes."""
    props: dict[str, str] = {}
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.lstrip() if not pending else raw.lstrip()
        if not pending and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending += line[:-1]
            continue
        logical.append(pending + line)
        pending = ""
    if pending:
        logical.append(pending)
    for line in logical:
        key_chars: list[str] = []
        i = 0
        while i < len(line) and line[i] not in "=: \t":
            if line[i] == "\\" and i + 1 < len(line):
                i += 1
            key_chars.append(line[i])
            i += 1
        rest = line[i:].lstrip(" \t")
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t")
        value = rest.replace("\\n", "\n").replace("\\t", "\t").replace("\\\\", "\\")
        props["".join(key_chars)] = value
    return props


def rest_address(worker: dict[str, str]) -> tuple[str, int]:
    """Host and port from ``listeners`` (the first one, http or https) or
    ``rest.host.name``/``rest.port``."""
    listeners = worker.get("listeners", "").strip()
    if listeners:
        first = listeners.split(",")[0].strip()
        url = urlparse(first)
        if url.scheme not in ("http", "https", ""):
            raise WorkerConfigError(f"listeners: only http and https are supported, "
                                    f"got {first}")
        return url.hostname or DEFAULT_HOST, url.port or DEFAULT_PORT
    host = worker.get("rest.host.name", "").strip() or DEFAULT_HOST
    return host, int(worker.get("rest.port", DEFAULT_PORT))


def check_listen(host: str, port: int) -> None:
    """Fail with one clear line before any connector starts if the REST port is taken."""
    try:
        with socket.create_server((host, port)):
            pass
    except OSError as exc:
        raise WorkerConfigError(f"cannot listen on {host}:{port}: {exc.strerror}") from None


def check_converters(worker: dict[str, str]) -> None:
    """``key.converter`` and ``value.converter`` are set and name known converters."""
    missing = [k for k in CONVERTER_KEYS if not worker.get(k, "").strip()]
    if missing:
        names = " and ".join(f'"{k}"' for k in missing)
        raise WorkerConfigError(
            f"Missing required configuration {names} which "
            f"{'has' if len(missing) == 1 else 'have'} no default value "
            f"(e.g. {missing[0]}=org.apache.kafka.connect.storage.StringConverter)")
    for key in CONVERTER_KEYS:
        try:
            find_converter(worker[key])
        except PluginNotFound as exc:
            raise WorkerConfigError(f"Invalid value {worker[key].strip()} for configuration "
                                    f"{key}: {exc}") from None
