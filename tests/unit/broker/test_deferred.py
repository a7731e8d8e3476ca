"""DeferredAnswers: answers written in request order whatever order their waits end in."""

from __future__ import annotations

import asyncio

import pytest

from strom.broker.deferred import DeferredAnswers


class _Sink:
    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.done: list[int] = []
        self.failed: list[BaseException] = []

    def answers(self) -> DeferredAnswers:
        return DeferredAnswers(self.written.append, lambda key, *_times: self.done.append(key),
                               self.failed.append)  # fmt: skip


async def _answer(gate: asyncio.Future[None], data: bytes) -> bytes:
    await gate
    return data


def test_answers_leave_in_request_order() -> None:
    async def run() -> _Sink:
        sink = _Sink()
        answers = sink.answers()
        loop = asyncio.get_running_loop()
        gates = [loop.create_future() for _ in range(3)]
        for i, gate in enumerate(gates):
            answers.add(loop.create_task(_answer(gate, f"a{i}".encode())), 0, 0.0, 0.0)
        gates[2].set_result(None)  # the last wait ends first: nothing may leave yet
        await asyncio.sleep(0.01)
        assert sink.written == [] and len(answers) == 3
        gates[0].set_result(None)
        await asyncio.sleep(0.01)
        assert sink.written == [b"a0"] and len(answers) == 2
        gates[1].set_result(None)
        await answers.drain()
        assert len(answers) == 0
        return sink

    sink = asyncio.run(run())
    assert sink.written == [b"a0", b"a1", b"a2"]
    assert sink.done == [0, 0, 0] and sink.failed == []


def test_a_failed_answer_stops_the_rest_and_reports() -> None:
    async def boom() -> bytes:
        raise RuntimeError("encoder bug")

    async def run() -> tuple[_Sink, asyncio.Task[bytes]]:
        sink = _Sink()
        answers = sink.answers()
        loop = asyncio.get_running_loop()
        later = loop.create_task(_answer(loop.create_future(), b"never"))
        answers.add(loop.create_task(boom()), 0, 0.0, 0.0)
        answers.add(later, 0, 0.0, 0.0)
        await answers.drain()
        await asyncio.sleep(0)
        return sink, later

    sink, later = asyncio.run(run())
    assert sink.written == []
    assert [str(e) for e in sink.failed] == ["encoder bug"]
    assert later.cancelled()


def test_cancel_ends_the_waits_without_writing() -> None:
    async def run() -> tuple[_Sink, list[asyncio.Task[bytes]]]:
        sink = _Sink()
        answers = sink.answers()
        loop = asyncio.get_running_loop()
        tasks = [loop.create_task(_answer(loop.create_future(), b"x")) for _ in range(2)]
        for task in tasks:
            answers.add(task, 0, 0.0, 0.0)
        answers.cancel()
        await asyncio.sleep(0)
        await answers.drain()  # nothing left: returns at once
        return sink, tasks

    sink, tasks = asyncio.run(run())
    assert all(t.cancelled() for t in tasks)
    assert sink.written == [] and sink.failed == []


@pytest.mark.parametrize("count", [1, 5])
def test_drain_returns_once_everything_is_written(count: int) -> None:
    async def run() -> _Sink:
        sink = _Sink()
        answers = sink.answers()
        loop = asyncio.get_running_loop()
        for i in range(count):
            answers.add(loop.create_task(asyncio.sleep(0.001 * (count - i), f"{i}".encode())),
                        0, 0.0, 0.0)  # fmt: skip
        await answers.drain()
        return sink

    assert asyncio.run(run()).written == [f"{i}".encode() for i in range(count)]
