"""Tables on a narrow terminal (issue 21): the key columns keep every character, the free-text
columns narrow and wrap, nothing is dropped."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from strom.cli.group import FLEXIBLE, OFFSETS_HEADERS
from strom.cli.output import MIN_FLEXIBLE_WIDTH, column_widths, rich_table

MEMBER = "rdkafka-5d0c2a9e-7b31-4f0e-9a55-1c2d3e4f5a6b"
ROWS = [
    ("click-reader-analytics", "clickstream-events-v2", p, 1_234_567 + p, 1_240_000 + p * 7,
     5433 + p * 6, f"{MEMBER}-{p}", "/10.128.201.17", "click-reader-service-instance-7")
    for p in range(12)
]  # fmt: skip


def render(width: int) -> list[str]:
    drawn, grid = rich_table(OFFSETS_HEADERS, ROWS, width, FLEXIBLE)
    console = Console(file=io.StringIO(), width=drawn, color_system=None)
    console.print(grid)
    text = console.file.getvalue()  # type: ignore[attr-defined]
    return [line.rstrip() for line in text.splitlines() if line.strip()]


def columns(header: str) -> list[tuple[int, int]]:
    starts = [header.index(h) for h in OFFSETS_HEADERS]
    return list(zip(starts, [*starts[1:], 10_000], strict=True))


@pytest.mark.parametrize("width", [80, 120, 240])
def test_key_columns_are_whole_and_free_text_wraps(width: int) -> None:
    lines = render(width)
    header = lines[0]
    assert header.split() == list(OFFSETS_HEADERS)  # every header whole
    spans = columns(header)
    body = [line for line in lines[1:] if not set(line.strip()) <= {"─"}]
    rows: list[list[str]] = []
    for line in body:  # a row's first line has its GROUP cell; its next lines wrap free text
        cells = [line[a:b].strip() for a, b in spans]
        if cells[0]:
            rows.append(cells)
        else:
            rows[-1] = [f"{old}{new}" if i >= 6 else old
                        for i, (old, new) in enumerate(zip(rows[-1], cells, strict=True))]
    assert [tuple(r) for r in rows] == [tuple(map(str, row)) for row in ROWS]
    natural = sum(len(max([h, *(str(r[i]) for r in ROWS)], key=len))
                  for i, h in enumerate(OFFSETS_HEADERS))
    if natural + 3 * (len(OFFSETS_HEADERS) - 1) + 2 <= width:  # cells, padding, edges
        assert len(body) == len(ROWS)  # it fits: one line a row, nothing wrapped


def test_only_flexible_columns_narrow_and_not_below_their_floor() -> None:
    headers = ("GROUP", "CONSUMER-ID", "HOST")
    widths = column_widths([30, 45, 15], headers, 8, 60, ("CONSUMER-ID", "HOST"))
    assert widths[0] == 30 and widths[1] >= MIN_FLEXIBLE_WIDTH and widths[2] >= len("HOST")
    assert sum(widths) + 8 <= 60 or widths[1:] == [MIN_FLEXIBLE_WIDTH, MIN_FLEXIBLE_WIDTH]
    # too narrow for even the key columns: they stay whole (the table is drawn wider)
    assert column_widths([50, 45], ("GROUP", "HOST"), 4, 40, ("HOST",)) == [50, 12]


def test_no_ellipsis_anywhere() -> None:
    for width in (80, 120):
        assert not any(re.search("…", line) for line in render(width))
