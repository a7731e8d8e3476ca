"""A running process's identity in a file, so another process can find it and stop it.

``strom serve`` writes ``strom.pid`` into its data dir while it runs (and removes it when it
exits), whoever started it; ``strom cluster stop|down`` read them to stop the brokers of a
local cluster's data dir. The file is one JSON object::

    {"pid": 1234, "start_time": 5678, "listen": "127.0.0.1:9092", "admin": "127.0.0.1:9645"}

``start_time`` is the process's start in clock ticks since boot (``/proc/<pid>/stat`` field
22): a PID counts as the recorded process only while that still matches, so a PID reused by
another program since (after a crash left the file behind) is never signalled. Written to a
temporary file and renamed, so a reader sees the old file or the new one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

FILE_NAME = "strom.pid"


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot, or None if it is gone (or a zombie:
    exited, waiting for a parent that is not us to reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def is_running(pid: int, started: int | None) -> bool:
    """Whether ``pid`` is still the process that started at ``started``."""
    return started is not None and start_time(pid) == started


def write(directory: Path, **info: Any) -> Path:
    """Record this process in ``directory``/strom.pid (with ``info``); the file's path."""
    pid = os.getpid()
    path = directory / FILE_NAME
    tmp = directory / f".{FILE_NAME}.{pid}.tmp"
    tmp.write_text(json.dumps({"pid": pid, "start_time": start_time(pid), **info}) + "\n")
    tmp.replace(path)
    return path


def read(path: Path) -> dict[str, Any] | None:
    """The record in ``path``, or None if there is none (or it is not readable)."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and isinstance(doc.get("pid"), int) else None


def remove(path: Path) -> None:
    """Remove ``path`` if it still records this process (a successor may have replaced it)."""
    doc = read(path)
    if doc is not None and doc.get("pid") == os.getpid():
        path.unlink(missing_ok=True)
