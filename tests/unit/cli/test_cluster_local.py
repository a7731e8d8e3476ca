"""``strom cluster up|down|stop|start``'s bookkeeping: the PID identity check."""

from __future__ import annotations

import os

from strom.cli.cluster_local import start_time


def test_start_time_identifies_a_process() -> None:
    mine = start_time(os.getpid())
    assert isinstance(mine, int) and mine > 0
    assert start_time(os.getpid()) == mine
    assert start_time(2**22 + 12345) is None  # above pid_max: no such process
