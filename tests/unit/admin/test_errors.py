"""strom.admin.errors: letting go of a client exception's frames."""

from __future__ import annotations

import gc
import weakref

import pytest
from confluent_kafka import KafkaError, KafkaException

from strom.admin.errors import forget_frames, fresh


class _Held:
    """Something a frame's locals hold (a producer, an Arrow batch)."""


def _commit(kept: list[BaseException], held: list[weakref.ref[_Held]]) -> None:
    big = _Held()
    held.append(weakref.ref(big))
    try:
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "2 message(s) timed out"))
    except KafkaException as exc:
        kept.append(exc)  # what confluent-kafka 2.16 does by mistake: a reference nobody frees
        raise fresh(exc) from None


def test_a_kept_exception_no_longer_holds_the_frames_it_passed() -> None:
    kept: list[BaseException] = []
    held: list[weakref.ref[_Held]] = []
    with pytest.raises(KafkaException) as info:
        _commit(kept, held)
    raised = info.value
    assert raised is not kept[0]
    assert raised.args[0].code() == KafkaError._TIMED_OUT  # the same KafkaError
    assert kept[0].__traceback__ is None and kept[0].__context__ is None
    del info, raised
    gc.collect()
    assert held[0]() is None, "the kept exception still holds the frame's locals"


def test_without_it_the_kept_exception_holds_them() -> None:
    """The check above can fail: a kept exception that is not let go of pins the frame."""
    kept: list[BaseException] = []
    held: list[weakref.ref[_Held]] = []

    def commit() -> None:
        big = _Held()
        held.append(weakref.ref(big))
        try:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))
        except KafkaException as exc:
            kept.append(exc)
            raise

    with pytest.raises(KafkaException):
        commit()
    gc.collect()
    assert held[0]() is not None
    forget_frames(kept[0])
    gc.collect()
    assert held[0]() is None
