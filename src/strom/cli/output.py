"""Rendering of command results: aligned text tables (kafka-*.sh style) and JSON."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from typing import Any

FORMATS = ("text", "json")


def cell(value: Any) -> str:
    """A table cell: ``-`` for a missing/empty value, like kafka-consumer-groups.sh."""
    if value is None or value == "":
        return "-"
    return str(value)


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Columns left-aligned to their widest cell, one space apart; the last one unpadded."""
    cells = [list(headers)] + [[cell(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for row in cells:
        parts = [c.ljust(widths[i]) for i, c in enumerate(row[:-1])] + [row[-1]]
        lines.append(" ".join(parts).rstrip())
    return "\n".join(lines)


def print_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """Print :func:`table` to stdout."""
    print(table(headers, rows))


def print_json(document: Any) -> None:
    """Print one JSON document on one line to stdout."""
    print(json.dumps(document, sort_keys=False, ensure_ascii=False))


def text(data: bytes | None) -> str | None:
    """Bytes as text (UTF-8, invalid sequences replaced); None stays None."""
    if data is None:
        return None
    if isinstance(data, str):
        return data
    return data.decode("utf-8", errors="replace")


def note(message: str) -> None:
    """An informational line on stderr (not part of the parseable output)."""
    print(message, file=sys.stderr)
