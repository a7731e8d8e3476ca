"""Share sessions (epochs, connections, limits) and share settings (group configs over the
broker's, ISO-8601 durations)."""

from __future__ import annotations

import uuid

import pytest

from strom.broker.group_configs import duration_ms
from strom.broker.share.sessions import ShareSessionCache, next_epoch
from strom.broker.share.settings import resolve
from strom.config import BrokerConfig
from strom.protocol.errors import ErrorCode as E

P = (uuid.UUID(int=1), 0)


def test_session_epochs() -> None:
    cache = ShareSessionCache()
    assert cache.use("g", "m", 1, 0) == (E.share_session_not_found, None)
    code, session, old = cache.open("g", "m", 7, [P], 0)
    assert code == E.none and old is None and session is not None and session.epoch == 1
    assert cache.use("g", "m", 1, 5)[0] == E.none and session.epoch == 2
    assert cache.use("g", "m", -1, 6)[0] == E.none and session.epoch == 2  # final: no move
    code, closed = cache.use("g", "m", 9, 7)
    assert code == E.invalid_share_session_epoch and closed is session
    assert cache.use("g", "m", 2, 8)[0] == E.share_session_not_found
    assert next_epoch(2**31 - 1) == 1


def test_reopening_replaces_and_connections_close_their_sessions() -> None:
    cache = ShareSessionCache(max_sessions=2)
    _, first, _ = cache.open("g", "m", 1, [P], 0)
    _, second, old = cache.open("g", "m", 1, [], 0)
    assert old is first and second is not first
    cache.open("g", "n", 2, [P], 0)
    assert cache.open("g", "o", 3, [], 0)[0] == E.share_session_limit_reached
    assert cache.uses("g", P) and not cache.uses("h", P)
    assert [s.member for s in cache.close_connection(1)] == ["m"]
    assert [s.member for s in cache.idle(older_than_ms=1)] == ["n"]
    assert cache.sessions == {}


def test_group_configs_override_the_broker() -> None:
    broker = BrokerConfig({"group.share.record.lock.duration.ms": "20000"})
    s = resolve({}, broker)
    assert (s.lock_ms, s.delivery_limit, s.max_locks, s.auto_offset_reset, s.read_committed) == (
        20000, 5, 2000, "latest", False)
    s = resolve({"share.record.lock.duration.ms": "5000", "share.delivery.count.limit": "3",
                 "share.auto.offset.reset": "EARLIEST", "share.isolation.level": "read_committed",
                 "share.renew.acknowledge.enable": "false"}, broker)
    assert (s.lock_ms, s.delivery_limit, s.auto_offset_reset, s.read_committed, s.renew_enabled) == (
        5000, 3, "earliest", True, False)


@pytest.mark.parametrize("text,ms", [("PT1H", 3_600_000), ("P1D", 86_400_000),
                                     ("PT1.5S", 1500), ("P1DT2H3M4S", 93_784_000)])
def test_durations(text: str, ms: int) -> None:
    assert duration_ms(text) == ms


@pytest.mark.parametrize("text", ["", "P", "1H", "PT", "PTxS"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError):
        duration_ms(text)
