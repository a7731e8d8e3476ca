"""KIP-392's replica selection (strom.replication.replica_selector) on a partition's follower states."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from strom.replication.metadata_cache import BrokerInfo, MetadataCache
from strom.replication.partition import FollowerState
from strom.replication.replica_selector import (
    LEADER_SELECTOR,
    RACK_AWARE_SELECTOR,
    check_selector,
    preferred_read_replica,
)


def _setup(leos: dict[int, int]) -> tuple[object, MetadataCache]:
    cache = MetadataCache(node_id=1)
    cache.brokers = {1: BrokerInfo(1, "h", 1, "a"), 2: BrokerInfo(2, "h", 2, "b"),
                     3: BrokerInfo(3, "h", 3, "b"), 4: BrokerInfo(4, "h", 4, "c")}  # fmt: skip
    followers = {r: FollowerState(log_end_offset=leo, last_caught_up_ms=r) for r, leo in leos.items()}
    return SimpleNamespace(local_id=1, followers=followers), cache


def test_a_follower_in_the_clients_rack_with_the_most_data() -> None:
    part, cache = _setup({2: 90, 3: 100, 4: 100})
    assert preferred_read_replica(RACK_AWARE_SELECTOR, part, cache, "b", 50) == 3  # type: ignore[arg-type]
    assert preferred_read_replica(RACK_AWARE_SELECTOR, part, cache, "c", 50) == 4  # type: ignore[arg-type]


def test_the_leader_when_it_shares_the_rack_or_nobody_does() -> None:
    part, cache = _setup({2: 100, 3: 100, 4: 100})
    for rack in ("a", "z", ""):
        assert preferred_read_replica(RACK_AWARE_SELECTOR, part, cache, rack, 0) == -1  # type: ignore[arg-type]
    assert preferred_read_replica(LEADER_SELECTOR, part, cache, "b", 0) == -1  # type: ignore[arg-type]
    assert preferred_read_replica(None, part, cache, "b", 0) == -1  # type: ignore[arg-type]


def test_followers_behind_the_offset_or_gone_are_not_chosen() -> None:
    part, cache = _setup({2: 40, 3: 100})
    assert preferred_read_replica(RACK_AWARE_SELECTOR, part, cache, "b", 50) == 3  # type: ignore[arg-type]
    del cache.brokers[3]  # not alive
    assert preferred_read_replica(RACK_AWARE_SELECTOR, part, cache, "b", 50) == -1  # type: ignore[arg-type]


def test_selector_names() -> None:
    assert check_selector(None) is None and check_selector("") is None
    assert check_selector("RackAwareReplicaSelector") == RACK_AWARE_SELECTOR
    assert check_selector(LEADER_SELECTOR) == LEADER_SELECTOR
    with pytest.raises(ValueError, match="replica.selector.class=com.example.Mine"):
        check_selector("com.example.Mine")
