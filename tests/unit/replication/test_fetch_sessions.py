"""Fetch sessions (KIP-227): the leader's cache and the follower's request builder."""

from __future__ import annotations

from strom.broker.fetch_session import EVICTABLE_AFTER_MS, FetchSessionCache, next_epoch
from strom.replication.replica_fetcher import FollowerSession


def test_cache_is_bounded_and_evicts_only_idle_sessions() -> None:
    cache = FetchSessionCache(2)
    first, second = cache.create(0), cache.create(1)
    assert first is not None and second is not None and first.id != second.id
    assert cache.create(2) is None  # full, nobody idle long enough: no session (full fetches)
    cache.touch(first, 10)
    third = cache.create(EVICTABLE_AFTER_MS + 5)  # the least recently used (second) goes
    assert third is not None and cache.get(second.id) is None and cache.get(first.id) is first
    assert len(cache) == 2
    assert FetchSessionCache(0).create(0) is None


def test_epochs_wrap_to_one() -> None:
    assert next_epoch(1) == 2 and next_epoch(2**31 - 1) == 1


def test_follower_session_sends_only_changes() -> None:
    session = FollowerSession()
    wanted = {("t", 0): (5, 1, 1), ("t", 1): (0, 1, -1)}
    send, forgotten, epoch = session.build(wanted)
    assert (send, forgotten, epoch) == (wanted, [], 0)  # full, asking for a session
    session.answered(77, send, forgotten)
    assert (session.id, session.epoch) == (77, 1)
    send, forgotten, epoch = session.build({("t", 0): (9, 1, 1), ("t", 1): (0, 1, -1)})
    assert (send, forgotten, epoch) == ({("t", 0): (9, 1, 1)}, [], 1)
    session.answered(77, send, forgotten)
    send, forgotten, epoch = session.build({("t", 0): (9, 1, 1)})
    assert (send, forgotten, epoch) == ({}, [("t", 1)], 2)
    session.answered(77, send, forgotten)
    assert session.sent == {("t", 0): (9, 1, 1)} and session.epoch == 3
    session.reset()
    assert session.build({("t", 0): (9, 1, 1)}) == ({("t", 0): (9, 1, 1)}, [], 0)
