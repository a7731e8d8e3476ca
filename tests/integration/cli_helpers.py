"""Helpers for the CLI tests: run ``python -m strom`` as a script would, parse its output."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


def strom(
    *args: str, stdin: str = "", timeout: float = 60.0, env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run the real ``strom`` CLI in a subprocess and capture its output.

    ``env`` adds to (and overrides) the environment; STROM_BROKERS is cleared unless given,
    so a developer's own setting never leaks into a test."""
    full = {k: v for k, v in os.environ.items() if k != "STROM_BROKERS"}
    full.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "strom", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full,
        cwd=cwd,
    )


def side_by_side(*calls: Callable[[], Any]) -> list[Any]:
    """Run independent CLI calls concurrently (each is a subprocess) and return their results."""
    with ThreadPoolExecutor(len(calls)) as pool:
        return [f.result() for f in [pool.submit(c) for c in calls]]


def assert_clean_error(proc: subprocess.CompletedProcess[str]) -> str:
    """Non-zero exit, exactly one line on stderr, no traceback; returns that line."""
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


class Cli:
    """The CLI pointed at one broker (``--bootstrap-server`` appended to every call)."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap

    def run(
        self, *args: str, stdin: str = "", timeout: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        return strom(*args, "--bootstrap-server", self.bootstrap, stdin=stdin, timeout=timeout)

    def ok(self, *args: str, stdin: str = "", timeout: float = 60.0) -> str:
        """stdout of a successful run (the assertion message shows stderr otherwise)."""
        proc = self.run(*args, stdin=stdin, timeout=timeout)
        assert proc.returncode == 0, (
            f"strom {' '.join(args)}: exit {proc.returncode}: {proc.stderr}"
        )
        assert "Traceback" not in proc.stderr, proc.stderr
        return proc.stdout

    def lines(self, *args: str, stdin: str = "", timeout: float = 60.0) -> list[str]:
        """stdout lines of a successful run."""
        return self.ok(*args, stdin=stdin, timeout=timeout).splitlines()

    def fail(self, *args: str, stdin: str = "") -> str:
        """The one stderr line of a run that must fail cleanly."""
        return assert_clean_error(self.run(*args, stdin=stdin))


def parse_table(output: str) -> list[dict[str, str]]:
    """A whitespace-aligned table (header line, then rows) as dicts keyed by header."""
    lines = [line for line in output.splitlines() if line.strip()]
    headers = lines[0].split()
    return [dict(zip(headers, line.split(), strict=True)) for line in lines[1:]]


def eventually(check: Callable[[], T], timeout: float = 15.0, interval: float = 0.3) -> T:
    """Retry ``check`` until it returns a truthy value without raising AssertionError."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = check()
            if result:
                return result
        except AssertionError:
            if time.monotonic() > deadline:
                raise
        if time.monotonic() > deadline:
            raise AssertionError(f"still false after {timeout:g} s: {result!r}")
        time.sleep(interval)
