"""The error handler: retries within errors.retry.timeout, tolerance none/all (fake clock)."""

from __future__ import annotations

import pytest

from strom.connect.api import ConnectError, RetriableError
from strom.connect.errors import ErrorHandler, Original, Tolerated, definitions


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def handler(clock: FakeClock, **config: str) -> ErrorHandler:
    h = ErrorHandler("c", 0, {k.replace("_", "."): v for k, v in config.items()}, sink=True,
                     sleep=clock.sleep, clock=clock)
    h.begin(lambda: Original("t", 0, 5, b"k", b"v", []))
    return h


def test_retriable_errors_retried_with_doubling_delay_until_success() -> None:
    clock = FakeClock()
    h = handler(clock, errors_retry_timeout="10000", errors_retry_delay_max_ms="1000")
    attempts = iter([RetriableError("a"), RetriableError("b"), RetriableError("c"), None])

    def op() -> str:
        exc = next(attempts)
        if exc:
            raise exc
        return "done"

    assert h.run("TASK_PUT", "X", op) == "done"
    assert clock.sleeps == [0.3, 0.6, 1.0]


def test_retry_timeout_bounds_retries_then_tolerance_none_fails() -> None:
    clock = FakeClock()
    h = handler(clock, errors_retry_timeout="1000")

    def op() -> None:
        raise RetriableError("db down")

    with pytest.raises(ConnectError, match="Tolerance exceeded in error handler") as info:
        h.run("VALUE_CONVERTER", "X", op)
    assert isinstance(info.value.__cause__, RetriableError)
    assert clock.now <= 1.0 and clock.sleeps == [0.3, 0.6]


def test_no_retry_by_default_and_tolerance_all_skips() -> None:
    clock = FakeClock()
    h = handler(clock, errors_tolerance="all", errors_log_enable="true")

    def op() -> None:
        raise RetriableError("x")

    with pytest.raises(Tolerated):
        h.run("VALUE_CONVERTER", "X", op)
    assert clock.sleeps == [] and h.failures == 1

    def bad() -> None:
        raise ValueError("not json")

    with pytest.raises(Tolerated):
        h.run("VALUE_CONVERTER", "X", bad)
    assert h.failures == 2


def test_dlq_may_not_be_a_consumed_topic() -> None:
    _, errors = definitions({"topics": "a,dlq", "errors.deadletterqueue.topic.name": "dlq"},
                            sink=True)
    assert errors["errors.deadletterqueue.topic.name"] == [
        "The DLQ topic 'dlq' may not be included in the list of topics ('topics=a,dlq') "
        "consumed by the connector"]
    d, _ = definitions({}, sink=False)
    assert "errors.deadletterqueue.topic.name" not in d.keys
    values = {v.name: v.errors for v in d.validate({"errors.tolerance": "some"})}
    assert values["errors.tolerance"] == ["Invalid value some for configuration "
                                          "errors.tolerance: String must be one of: none, all"]


def test_source_offsets_released_only_for_the_acknowledged_prefix() -> None:
    from strom.connect.api import SourceTask
    from strom.connect.backing import MemoryOffsetBackingStore
    from strom.connect.converters import StringConverter
    from strom.connect.tasks import WorkerSourceTask, _SubmittedBatch

    class Idle(SourceTask):
        def start(self, config: dict[str, str]) -> None: ...
        def stop(self) -> None: ...
        def poll(self) -> None:
            return None

    task = WorkerSourceTask("c", 0, Idle(), {}, StringConverter(), StringConverter(), {}, 1.0,
                            offsets=MemoryOffsetBackingStore())
    first, second = _SubmittedBatch(outstanding=2), _SubmittedBatch(outstanding=1)
    first.offsets, second.offsets = {"p": {"pos": 1}}, {"p": {"pos": 2}}
    task.in_flight.extend([first, second])
    second.delivered(None, None)
    task._collect()
    assert task.pending == {}  # the earlier batch is still in flight
    first.delivered(None, None)
    first.delivered(None, None)
    task._collect()
    assert task.pending == {"p": {"pos": 2}} and not task.in_flight
    failed = _SubmittedBatch(outstanding=1, offsets={"p": {"pos": 3}})
    task.in_flight.append(failed)
    failed.delivered("boom", None)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="producing to Kafka failed: boom"):
        task._collect()
    assert task.pending == {"p": {"pos": 2}}
