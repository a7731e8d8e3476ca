"""Rendering of command results: aligned tables (kafka-*.sh style) and JSON.

On a terminal tables are drawn by ``rich`` (bold headers, colour unless ``NO_COLOR`` is set);
piped or redirected they are plain text, columns left-aligned and one space apart, so scripts
can split them on whitespace. JSON output is one document per command, and always a list
(one object per row) so a script reads every command the same way.
"""

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


def is_terminal() -> bool:
    """True when stdout is an interactive terminal (rich tables), False when piped."""
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def print_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """A table on stdout: rich on a terminal, :func:`table` text otherwise."""
    if not is_terminal():
        print(table(headers, rows))
        return
    from rich import box
    from rich.console import Console
    from rich.table import Table

    grid = Table(box=box.SIMPLE_HEAD, header_style="bold cyan", pad_edge=False)
    for header in headers:
        grid.add_column(header, no_wrap=True)
    for row in rows:
        grid.add_row(*(cell(v) for v in row))
    Console().print(grid)


def print_json(document: Any) -> None:
    """Print one JSON document on one line to stdout."""
    print(json.dumps(document, sort_keys=False, ensure_ascii=False))


def text(data: bytes | str | None) -> str | None:
    """Bytes as text (UTF-8, invalid sequences replaced); None stays None."""
    if data is None:
        return None
    if isinstance(data, str):
        return data
    return data.decode("utf-8", errors="replace")


def note(message: str) -> None:
    """An informational line on stderr (not part of the parseable output)."""
    print(message, file=sys.stderr)
