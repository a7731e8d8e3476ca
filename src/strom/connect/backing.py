"""Backing stores: where a worker keeps source offsets, connector configs and statuses.

Each is an interface with the standalone implementations now (offsets in a local file,
configs and statuses in memory, as Kafka's standalone worker); distributed mode adds
implementations over compacted topics behind the same interfaces.

Offset file format (``offset.storage.file.filename``): one JSON document
``{"version": 1, "offsets": [{"key": [connector, source_partition], "value": offset}, ...]}``
— the key is what Kafka Connect writes as the key in its offset topic. The file is replaced
atomically (temp file, fsync, rename, fsync of the directory), so a crash leaves either the
old or the new offsets, never a torn file.
"""

from __future__ import annotations

import json
import os
import threading
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any


def _key(connector: str, partition: dict[str, Any]) -> str:
    return json.dumps([connector, partition], sort_keys=True, separators=(",", ":"))


class OffsetBackingStore(ABC):
    """Source offsets keyed by (connector name, source partition)."""

    @abstractmethod
    def get(self, connector: str, partition: dict[str, Any]) -> dict[str, Any] | None: ...

    @abstractmethod
    def put_all(self, connector: str, offsets: dict[str, dict[str, Any]]) -> None:
        """Store offsets given as {json(partition): offset} durably, in one step."""

    @abstractmethod
    def forget(self, connector: str) -> None: ...

    @abstractmethod
    def entries(self, connector: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        """Every (source partition, offset) stored for ``connector``."""


class MemoryOffsetBackingStore(OffsetBackingStore):
    def __init__(self) -> None:
        self._data: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def get(self, connector: str, partition: dict[str, Any]) -> dict[str, Any] | None:
        with self._lock:
            return self._data.get(_key(connector, partition))

    def put_all(self, connector: str, offsets: dict[str, dict[str, Any]]) -> None:
        with self._lock:
            for partition_json, offset in offsets.items():
                self._data[_key(connector, json.loads(partition_json))] = offset
            self._save()

    def entries(self, connector: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        with self._lock:
            keys = [(json.loads(k), v) for k, v in self._data.items()]
        return [(key[1], value) for key, value in keys if key[0] == connector]

    def put_all_or_remove(self, connector: str,
                          offsets: list[tuple[dict[str, Any], dict[str, Any] | None]]) -> None:
        """Set (or with a None offset, remove) each partition's offset in one store."""
        with self._lock:
            for partition, offset in offsets:
                key = _key(connector, partition)
                if offset is None:
                    self._data.pop(key, None)
                else:
                    self._data[key] = offset
            self._save()

    def forget(self, connector: str) -> None:
        with self._lock:
            for k in [k for k in self._data if json.loads(k)[0] == connector]:
                del self._data[k]
            self._save()

    def _save(self) -> None:
        """Hook for persistent subclasses (called with the lock held)."""


class FileOffsetBackingStore(MemoryOffsetBackingStore):
    """Offsets kept in memory and written to one JSON file atomically on each store."""

    def __init__(self, path: str | Path) -> None:
        super().__init__()
        self.path = Path(path)
        if self.path.exists() and self.path.stat().st_size:
            doc = json.loads(self.path.read_text())
            for entry in doc.get("offsets", []):
                connector, partition = entry["key"]
                self._data[_key(connector, partition)] = entry["value"]

    def _save(self) -> None:
        entries = [{"key": json.loads(k), "value": v} for k, v in self._data.items()]
        text = json.dumps({"version": 1, "offsets": entries}, sort_keys=True)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        dir_fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


class ConfigBackingStore(ABC):
    """Connector configurations and their target state (STARTED, PAUSED, STOPPED)."""

    @abstractmethod
    def put(self, name: str, config: dict[str, str]) -> None: ...

    @abstractmethod
    def remove(self, name: str) -> None: ...

    @abstractmethod
    def get(self, name: str) -> dict[str, str] | None: ...

    @abstractmethod
    def names(self) -> list[str]: ...

    @abstractmethod
    def set_target_state(self, name: str, state: str) -> None: ...

    @abstractmethod
    def target_state(self, name: str) -> str: ...


class MemoryConfigBackingStore(ConfigBackingStore):
    """Standalone: configs live as long as the worker (re-created from the CLI files)."""

    def __init__(self) -> None:
        self._configs: dict[str, dict[str, str]] = {}
        self._states: dict[str, str] = {}

    def put(self, name: str, config: dict[str, str]) -> None:
        self._configs[name] = dict(config)
        self._states.setdefault(name, "STARTED")

    def remove(self, name: str) -> None:
        self._configs.pop(name, None)
        self._states.pop(name, None)

    def get(self, name: str) -> dict[str, str] | None:
        config = self._configs.get(name)
        return dict(config) if config is not None else None

    def names(self) -> list[str]:
        return sorted(self._configs)

    def set_target_state(self, name: str, state: str) -> None:
        self._states[name] = state

    def target_state(self, name: str) -> str:
        return self._states.get(name, "STARTED")
