"""A partition whose leader refuses it is held back: 50 ms at first (a leader a few
milliseconds behind its LeaderAndIsr, as at topic creation), doubling per refusal up to
``replica.fetch.backoff.ms``, so a refusing leader is not asked in a tight loop (before,
OffsetForLeaderEpoch was re-sent without any delay, five times in 16 ms)."""

from __future__ import annotations

import pytest

from strom.replication.replica_fetcher import FetchState


def test_refusals_back_off_exponentially_up_to_the_configured_backoff() -> None:
    state = FetchState(leader_epoch=3)
    delays = []
    for _ in range(8):
        state.delay(100.0, 1.0)
        delays.append(round(state.delayed_until - 100.0, 3))
    assert delays == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0]
    assert state.failures == 8


@pytest.mark.parametrize("failures", [0, 40, 10_000])
def test_the_delay_never_exceeds_the_backoff(failures: int) -> None:
    state = FetchState(leader_epoch=0, failures=failures)
    state.delay(0.0, 0.3)
    assert 0 < state.delayed_until <= 0.3
