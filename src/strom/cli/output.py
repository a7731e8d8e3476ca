"""Rendering of command results: aligned tables (kafka-*.sh style) and JSON.

On a terminal tables are drawn by ``rich`` (bold headers, colour unless ``NO_COLOR`` is set);
piped or redirected they are plain text, columns left-aligned and one space apart, so scripts
can split them on whitespace. JSON output is one document per command, and always a list
(one object per row) so a script reads every command the same way.

A terminal table never cuts a cell short. When it is wider than the terminal, only the
columns a command names *flexible* (free text such as a consumer id, a client id, a host)
narrow, down to :data:`MIN_FLEXIBLE_WIDTH`, and their cells wrap inside the column; the other
columns (names, partitions, offsets, lag) keep their whole width, and if the table still does
not fit it is drawn wider than the terminal (which wraps the lines) rather than truncated.
"""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Iterable, Sequence
from typing import Any

FORMATS = ("text", "json")
#: a flexible column is never narrower than this (nor than its header)
MIN_FLEXIBLE_WIDTH = 12


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


def print_table(headers: Sequence[str], rows: Iterable[Sequence[Any]],
                flexible: Sequence[str] = ()) -> None:  # fmt: skip
    """A table on stdout: rich on a terminal, :func:`table` text otherwise. ``flexible``
    names the columns that may narrow (and wrap) to fit the terminal (module docstring)."""
    if not is_terminal():
        print(table(headers, rows))
        return
    from rich.console import Console

    terminal = Console()
    width, grid = rich_table(headers, rows, terminal.width, flexible)
    Console(width=width).print(grid)


def column_widths(natural: list[int], headers: Sequence[str], overhead: int, width: int,
                  flexible: Sequence[str]) -> list[int]:  # fmt: skip
    """Each column's width for a terminal ``width`` wide: the natural widths, the widest
    flexible columns narrowed first (never below :data:`MIN_FLEXIBLE_WIDTH` or their header)
    until the table fits or none can narrow further."""
    widths = list(natural)
    floors = [max(MIN_FLEXIBLE_WIDTH, len(h)) if h in flexible else w
              for h, w in zip(headers, natural, strict=True)]  # fmt: skip
    excess = sum(widths) + overhead - width
    while excess > 0:
        shrinkable = [i for i, w in enumerate(widths) if w > floors[i]]
        if not shrinkable:
            break
        widest = max(shrinkable, key=lambda i: widths[i])
        widths[widest] -= 1
        excess -= 1
    return widths


def rich_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], width: int,
               flexible: Sequence[str] = ()) -> tuple[int, Any]:  # fmt: skip
    """(the console width to draw at, the rich Table) for a terminal ``width`` wide."""
    from rich import box
    from rich.console import Console
    from rich.measure import Measurement
    from rich.table import Table

    cells = [[cell(v) for v in row] for row in rows]
    natural = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]

    def build(widths: list[int]) -> Table:
        grid = Table(box=box.SIMPLE_HEAD, header_style="bold cyan", pad_edge=False)
        for header, w in zip(headers, widths, strict=True):
            if header in flexible:
                grid.add_column(header, width=w, overflow="fold")
            else:
                grid.add_column(header, width=w, no_wrap=True)
        for row in cells:
            grid.add_row(*row)
        return grid

    probe = Console(file=io.StringIO(), width=sum(natural) + 8 * len(headers) + 8)
    overhead = Measurement.get(probe, probe.options, build(natural)).maximum - sum(natural)
    widths = column_widths(natural, headers, overhead, width, flexible)
    return max(width, sum(widths) + overhead), build(widths)


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
