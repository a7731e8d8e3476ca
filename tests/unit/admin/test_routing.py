"""The routing of the admin layer's own requests (``strom.admin.routing``): leaders from metadata,
and :func:`route`'s rounds: a retriable answer or an unreachable broker is asked again after a
fresh lookup, other answers are final, and what is still pending at ``--timeout`` is returned
with the last reason, never raised."""

from __future__ import annotations

from types import SimpleNamespace as NS
from typing import Any

import pytest

from strom.admin import routing
from strom.admin.errors import TimedOutError, UnreachableError
from strom.protocol.errors import ErrorCode

NOT_LEADER = int(ErrorCode.not_leader_or_follower)
TIMEOUT = 0.5


def md(leaders: dict[int, int]) -> Any:
    brokers = {i: NS(id=i, host=f"h{i}", port=9092) for i in (1, 2)}
    parts = {p: NS(leader=leader) for p, leader in leaders.items()}
    return NS(brokers=brokers, topics={"t": NS(error=None, partitions=parts)})


def test_leaders_groups_by_address_and_names_what_has_none() -> None:
    by, missing = routing.leaders(md({0: 1, 1: 2, 2: 1, 3: -1, 4: 7}), [("t", p) for p in range(5)]
                                  + [("u", 0)])  # fmt: skip
    assert by == {"h1:9092": [("t", 0), ("t", 2)], "h2:9092": [("t", 1)]}
    assert missing[("t", 3)].startswith("LEADER_NOT_AVAILABLE")
    assert missing[("t", 4)].startswith("LEADER_NOT_AVAILABLE")  # a broker not alive
    assert missing[("u", 0)] == "UNKNOWN_TOPIC_OR_PARTITION"


def test_route_asks_the_new_leader_after_not_leader() -> None:
    views = [md({0: 1, 1: 2}), md({0: 2, 1: 2})]  # partition 0 moves from broker 1 to 2
    sent: list[tuple[str, list[Any]]] = []
    lookups: list[list[Any]] = []

    def lookup(keys: list[Any]) -> Any:  # a fresh metadata each round
        lookups.append(keys)
        return routing.leaders(views[min(len(lookups) - 1, 1)], keys)

    def send(where: str, keys: list[Any]) -> Any:
        sent.append((where, keys))
        if where == "h1:9092":
            return {k: (NOT_LEADER, None) for k in keys}
        return {k: (0, f"{k[1]}@{where}") for k in keys}

    done, failed = routing.route([("t", 0), ("t", 1)], lookup, send, routing.LEADER_RETRIABLE,
                                 TIMEOUT)
    assert failed == {}
    assert done == {("t", 0): (0, "0@h2:9092"), ("t", 1): (0, "1@h2:9092")}
    assert lookups == [[("t", 0), ("t", 1)], [("t", 0)]]  # only the pending key again
    assert sent == [("h1:9092", [("t", 0)]), ("h2:9092", [("t", 1)]), ("h2:9092", [("t", 0)])]


def test_route_gives_up_at_the_timeout_with_the_last_reason() -> None:
    calls = []

    def send(where: str, keys: list[Any]) -> Any:
        calls.append(where)
        if len(calls) % 2:
            raise UnreachableError(f"cannot reach the broker at {where}: refused")
        return {k: (int(ErrorCode.coordinator_load_in_progress), None) for k in keys}

    done, failed = routing.route(["a"], lambda ks: ({"h:1": ks}, {}), send,
                                 routing.COORDINATOR_RETRIABLE, TIMEOUT)  # fmt: skip
    assert done == {} and len(calls) >= 2
    assert failed["a"] in ("COORDINATOR_LOAD_IN_PROGRESS from h:1",
                           "cannot reach the broker at h:1: refused")  # fmt: skip
    with pytest.raises(TimedOutError, match="^cannot describe 'a': .* still after 0.5 s$"):
        routing.first_failure(failed, lambda k: f"cannot describe {k!r}", TIMEOUT)


def test_a_final_error_is_an_answer_not_a_retry() -> None:
    calls = []

    def send(where: str, keys: list[Any]) -> Any:
        calls.append(keys)
        return {k: (int(ErrorCode.transactional_id_not_found), None) for k in keys}

    done, failed = routing.route(["x"], lambda ks: ({"h:1": ks}, {}), send,
                                 routing.COORDINATOR_RETRIABLE, TIMEOUT)  # fmt: skip
    assert done == {"x": (int(ErrorCode.transactional_id_not_found), None)} and failed == {}
    assert calls == [["x"]]
