"""Kafka's epoch rule for a transactional id's producer (``init_transactional``)."""

from __future__ import annotations

import itertools

from strom.broker.producer_ids import (
    MAX_EPOCH,
    init_transactional,
)
from strom.broker.producer_ids import (
    ProducerIdAndEpoch as PE,
)
from strom.broker.producer_ids import (
    TransactionalProducer as TP,
)
from strom.protocol.errors import ErrorCode as E


def ids() -> itertools.count[int]:
    return itertools.count(100)


def test_first_init_and_bumps_need_the_matching_id_and_current_epoch() -> None:
    new = ids().__next__
    fresh = TP(7)
    assert init_transactional(fresh, None, new) == TP(7, 0)
    assert init_transactional(fresh, PE(3, 9), new) == TP(7, 0, -1, -1)  # just created
    cur = TP(7, 4)
    assert init_transactional(cur, PE(7, 4), new) == TP(7, 5, -1, 4)
    assert init_transactional(cur, None, new) == TP(7, 5)
    assert init_transactional(cur, PE(8, 4), new) is E.producer_fenced  # not its id
    assert init_transactional(cur, PE(7, 3), new) is E.producer_fenced  # a stale epoch
    # a retry of the bump whose answer was lost gets the same answer
    bumped = init_transactional(cur, PE(7, 4), new)
    assert isinstance(bumped, TP)
    assert init_transactional(bumped, PE(7, 4), new) == bumped


def test_exhausted_epoch_rotates_to_a_new_id_and_the_retry_is_recognised() -> None:
    new = ids().__next__
    cur = TP(7, MAX_EPOCH - 1)
    rotated = init_transactional(cur, PE(7, MAX_EPOCH - 1), new)
    assert rotated == TP(100, 0, 7, MAX_EPOCH - 1)
    assert isinstance(rotated, TP)
    assert init_transactional(rotated, PE(7, MAX_EPOCH - 1), new) == rotated  # retry
    assert init_transactional(rotated, PE(7, 5), new) is E.producer_fenced
    assert init_transactional(TP(7, MAX_EPOCH - 1), None, new) == TP(101, 0, 7, -1)
