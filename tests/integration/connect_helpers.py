"""A bounded wait the Connect integration tests share (their ``worker`` fixture is in
``tests/integration/conftest.py``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_for(check: Callable[[], Any], what: str, timeout: float = 25.0,
             interval: float = 0.1) -> Any:  # fmt: skip
    """``check()``'s first truthy result; AssertionError naming ``what`` and the last result
    when ``timeout`` seconds pass without one."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")
