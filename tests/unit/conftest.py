"""Fixtures shared by the unit tiers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from strom.protocol import records


@pytest.fixture(params=["native", "python"])
def record_codec(request: pytest.FixtureRequest) -> Iterator[str]:
    """Runs the test once on each record codec (the native one and its pure-Python fallback,
    :mod:`strom.protocol.records`); a module opts in with
    ``pytestmark = pytest.mark.usefixtures("record_codec")``. The native run fails, rather than
    skips, when the extension was not built: CI must test both."""
    before = records.IMPLEMENTATION
    records.use(request.param)
    try:
        yield request.param
    finally:
        records.use(before)
