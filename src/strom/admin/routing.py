"""Where an admin request over :mod:`strom.admin.wire` goes in a cluster, as Kafka's Admin client.

Three destinations, each Kafka's ``AdminApiLookupStrategy``: a partition's **leader** (from a
fresh Metadata each round), a key's **coordinator** (FindCoordinator v4, batched, asked of any
live broker), or **every broker** (from Metadata). :func:`route` sends each destination its
keys, one request per connection, and asks again (a new lookup, then the request) for the keys
answered with a retriable error, whose destination could not be found, or whose broker could
not be reached, every 100 ms until each key has an answer or ``timeout`` seconds have passed; it never
raises for one key's failure, so a caller can report it and go on with the others.
On a single node every destination is that node, and one round suffices.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Iterable
from typing import Any, TypeVar

from strom.admin import wire
from strom.admin.errors import AdminError, RefusedError, TimedOutError
from strom.protocol.errors import ErrorCode

K = TypeVar("K", bound=Hashable)
TopicPartition = tuple[str, int]
#: one round's destinations: address -> its keys; and the keys with none now -> why
Lookup = tuple[dict[str, list[K]], dict[K, str]]
#: one request's answer: key -> (error code, the key's part of the response)
Answers = dict[K, tuple[int, Any]]

RETRY_BACKOFF_S = 0.1
FIND_COORDINATOR, FIND_COORDINATOR_VERSION = 10, 4
TRANSACTION_KEY = 1  # FindCoordinator key_type of a transactional id
#: a partition's answers meaning "ask the leader Metadata names now"
LEADER_RETRIABLE = {ErrorCode.not_leader_or_follower, ErrorCode.leader_not_available,
                    ErrorCode.unknown_topic_or_partition}  # fmt: skip
#: a coordinator's answers meaning "find the coordinator again"
COORDINATOR_RETRIABLE = {ErrorCode.coordinator_load_in_progress, ErrorCode.not_coordinator,
                         ErrorCode.coordinator_not_available}  # fmt: skip


def address(broker: Any) -> str:
    """``host:port`` of a broker of confluent-kafka's ClusterMetadata."""
    return f"{broker.host}:{broker.port}"


def addresses(md: Any) -> dict[int, str]:
    """Every live broker's ``host:port`` by id, per ``md`` (confluent-kafka's ClusterMetadata)."""
    return {b.id: address(b) for b in md.brokers.values()}


def leaders(md: Any, keys: Iterable[TopicPartition]) -> Lookup[TopicPartition]:
    """``keys`` grouped by the address of their leader per ``md``; those without a known,
    live leader (or not in ``md`` at all) with the reason."""
    by_leader: dict[str, list[TopicPartition]] = {}
    missing: dict[TopicPartition, str] = {}
    for name, index in keys:
        t = md.topics.get(name)
        part = t.partitions.get(index) if t is not None and t.error is None else None
        broker = md.brokers.get(part.leader) if part is not None else None
        if part is None:
            missing[(name, index)] = "UNKNOWN_TOPIC_OR_PARTITION"
        elif broker is None:
            missing[(name, index)] = f"LEADER_NOT_AVAILABLE (leader {part.leader})"
        else:
            by_leader.setdefault(address(broker), []).append((name, index))
    return by_leader, missing


def coordinators(candidates: list[str], key_type: int, keys: Iterable[str], timeout: float
                 ) -> Lookup[str]:  # fmt: skip
    """``keys`` grouped by the address of their coordinator (one batched FindCoordinator, to the
    first of ``candidates`` that answers); those it has none for now with the reason. A key
    FindCoordinator refuses for good (an empty id: INVALID_REQUEST) is a :class:`RefusedError`."""
    wanted = sorted(set(keys))
    unreachable = ""
    for candidate in candidates:
        try:
            resp = wire.request(candidate, FIND_COORDINATOR, FIND_COORDINATOR_VERSION,
                                wait_s=timeout, key_type=key_type,
                                coordinator_keys=tuple(wanted))  # fmt: skip
        except AdminError as exc:
            unreachable = exc.message
            continue
        by_address: dict[str, list[str]] = {}
        missing: dict[str, str] = {}
        for c in resp.coordinators:
            code = ErrorCode(int(c.error_code))
            if code == ErrorCode.none:
                by_address.setdefault(f"{c.host}:{c.port}", []).append(str(c.key))
            elif code in COORDINATOR_RETRIABLE:
                missing[str(c.key)] = code.name.upper()
            else:
                raise RefusedError(f"cannot find the coordinator of {str(c.key)!r}: "
                               f"{code.name.upper()}")  # fmt: skip
        return by_address, missing
    return {}, {k: f"no broker answers FindCoordinator ({unreachable})" for k in wanted}


def route(
    keys: Iterable[K],
    lookup: Callable[[list[K]], Lookup[K]],
    send: Callable[[str, list[K]], Answers[K]],
    retriable: set[ErrorCode],
    timeout: float,
) -> tuple[dict[K, tuple[int, Any]], dict[K, str]]:
    """Each key's (error code, answer) from the destination ``lookup`` names, asking again for
    the keys answered with a ``retriable`` code until ``timeout`` seconds have passed; and the keys that got no
    final answer by then, each with the last reason (a code name, or why it was not sent).
    Other error codes are final answers: the caller reports them."""
    pending = list(dict.fromkeys(keys))
    done: dict[K, tuple[int, Any]] = {}
    deadline = time.monotonic() + timeout
    while True:
        by_address, why = lookup(pending)
        for where, batch in sorted(by_address.items()):
            try:
                answers = send(where, batch)
            except AdminError as exc:  # the broker went away: ask for the destination again
                why.update((k, exc.message) for k in batch)
                continue
            for k in batch:
                code, answer = answers.get(k, (int(ErrorCode.unknown_server_error), None))
                if ErrorCode(code) in retriable:
                    why[k] = f"{ErrorCode(code).name.upper()} from {where}"
                else:
                    done[k] = (code, answer)
        pending = [k for k in pending if k not in done]
        if not pending or time.monotonic() >= deadline:
            return done, {k: why.get(k, "no answer") for k in pending}
        time.sleep(min(RETRY_BACKOFF_S, max(deadline - time.monotonic(), 0.0)))


def first_failure(failed: dict[Any, str], what: Callable[[Any], str], timeout: float) -> None:
    """Raise a :class:`TimedOutError` for the first key of ``failed`` (if any), saying why
    (``timeout``: how long :func:`route` tried)."""
    for k, why in failed.items():
        more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
        raise TimedOutError(f"{what(k)}: {why}, still after {timeout:g} s{more}")
