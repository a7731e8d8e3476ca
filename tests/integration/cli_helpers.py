"""Helpers for the CLI tests: run ``python -m strom`` as a script would, parse its output."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


def strom(*args: str, stdin: str | None = None, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """Run the real ``strom`` CLI in a subprocess and capture its output."""
    return subprocess.run(
        [sys.executable, "-m", "strom", *args],
        input=stdin if stdin is not None else "",
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def ok(proc: subprocess.CompletedProcess[str]) -> str:
    """stdout of a successful run (the assertion message shows stderr otherwise)."""
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.stdout


def assert_clean_error(proc: subprocess.CompletedProcess[str]) -> str:
    """Non-zero exit, exactly one line on stderr, no traceback; returns that line."""
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def parse_table(output: str) -> list[dict[str, str]]:
    """A whitespace-aligned table (header line, then rows) as dicts keyed by header."""
    lines = [line for line in output.splitlines() if line.strip()]
    headers = lines[0].split()
    return [dict(zip(headers, line.split(), strict=True)) for line in lines[1:]]


def eventually(check: Callable[[], T], timeout: float = 15.0, interval: float = 0.3) -> T:
    """Retry ``check`` until it stops raising AssertionError (metadata propagation)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return check()
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(interval)


def lines(text: str) -> list[str]:
    """Output lines without the trailing newline."""
    return text.splitlines()


def args_with(bootstrap: str, *args: str) -> Sequence[str]:
    """``args`` followed by ``--bootstrap-server bootstrap``."""
    return (*args, "--bootstrap-server", bootstrap)
