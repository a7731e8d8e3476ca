"""Connectors page data: Kafka Connect's REST API (any worker: strom's or Kafka's).

Requests go through :class:`strom.admin.connect.ConnectRest` (as ``strom connector``'s do),
so an unreachable worker or a refused action is one readable line, shown on the page.
"""

from __future__ import annotations

from typing import Any

from strom.admin.connect import ConnectRest
from strom.admin.errors import InvalidInputError

#: Action name -> (HTTP method, path suffix) on ``/connectors/{name}``.
ACTIONS = {
    "pause": ("PUT", "/pause"),
    "resume": ("PUT", "/resume"),
    "restart": ("POST", "/restart?includeTasks=true&onlyFailed=false"),
}


class ConnectClient:
    def __init__(self, url: str) -> None:
        self.rest = ConnectRest(url)
        self.url = self.rest.url

    def _request(self, method: str, path: str) -> Any:
        return self.rest.request(method, path)

    def connectors(self) -> list[dict[str, Any]]:
        """Every connector with its state and its tasks' states."""
        doc = self._request("GET", "/connectors?expand=status&expand=info")
        rows = []
        for name, entry in sorted(doc.items()):
            status = entry.get("status") or {}
            info = entry.get("info") or {}
            rows.append({
                "name": name,
                "type": status.get("type") or info.get("type"),
                "class": (info.get("config") or {}).get("connector.class"),
                "state": (status.get("connector") or {}).get("state"),
                "worker_id": (status.get("connector") or {}).get("worker_id"),
                "trace": _last_line((status.get("connector") or {}).get("trace")),
                "tasks": [{"id": t.get("id"), "state": t.get("state"),
                           "worker_id": t.get("worker_id"), "trace": _last_line(t.get("trace"))}
                          for t in status.get("tasks", [])],
            })
        return rows

    def action(self, name: str, action: str, task: int | None = None) -> None:
        """Pause, resume or restart a connector (with its tasks), or restart one task."""
        path = ConnectRest.path(name)
        if task is not None:
            if action != "restart":
                raise InvalidInputError(f"unknown task action {action!r}")
            self._request("POST", f"{path}/tasks/{task}/restart")
            return
        if action not in ACTIONS:
            raise InvalidInputError(f"unknown connector action {action!r}: one of {', '.join(ACTIONS)}")
        method, suffix = ACTIONS[action]
        self._request(method, path + suffix)


def _last_line(trace: str | None) -> str | None:
    """A Java-style stack trace's useful line (the last one names the cause)."""
    if not trace:
        return None
    lines = [line for line in trace.strip().splitlines() if line.strip()]
    return lines[-1] if lines else None
