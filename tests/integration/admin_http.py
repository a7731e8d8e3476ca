"""Reading a broker's admin listener in tests: plain HTTP GETs, /metrics parsed with
prometheus-client's own parser."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from prometheus_client.parser import text_string_to_metric_families


def get(url: str, timeout: float = 10.0) -> tuple[int, bytes]:
    """(status, body) of a GET; HTTP error statuses are returned, not raised."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def get_json(url: str, timeout: float = 10.0) -> tuple[int, Any]:
    status, body = get(url, timeout)
    return status, json.loads(body)


class Scrape:
    """One /metrics scrape: sample values by sample name and labels."""

    def __init__(self, text: str) -> None:
        self.types: dict[str, str] = {}
        self.samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
        for family in text_string_to_metric_families(text):
            self.types[family.name] = family.type
            for sample in family.samples:
                self.samples[(sample.name, frozenset(sample.labels.items()))] = sample.value

    def value(self, name: str, **labels: str) -> float | None:
        return self.samples.get((name, frozenset(labels.items())))

    def get(self, name: str, default: float = 0.0, **labels: str) -> float:
        found = self.value(name, **labels)
        return default if found is None else found

    def series(self, name: str) -> dict[frozenset[tuple[str, str]], float]:
        return {labels: v for (n, labels), v in self.samples.items() if n == name}


def scrape(admin_url: str) -> Scrape:
    status, body = get(f"{admin_url}/metrics")
    assert status == 200, body[:200]
    return Scrape(body.decode())
