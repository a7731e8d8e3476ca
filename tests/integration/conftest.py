"""Fixtures of the integration tests beyond the shared ones in ``tests/conftest.py``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from strom.testing.connect import ConnectWorkerProcess


@pytest.fixture(scope="module")
def worker(broker: Any, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[ConnectWorkerProcess]:  # fmt: skip
    """A standalone worker on the module's broker, stopped by PID at the end."""
    proc = ConnectWorkerProcess(tmp_path_factory.mktemp("worker"), broker.bootstrap)
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()
