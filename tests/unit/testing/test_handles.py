"""strom.testing.handles: counting, freeing and naming the librdkafka handles of a process.

No broker is needed: a client pointed at a closed port is a live handle all the same (its
threads start in the constructor), which is exactly the kind that floods a test run.
"""

from __future__ import annotations

import gc
import sys
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from strom.testing import free_port
from strom.testing.handles import (
    describe_holders,
    drop_exception_locals,
    live_handle_count,
    live_handles,
    release_unreachable_handles,
)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="counts librdkafka's threads in /proc")

#: A module global that holds a client, as a leaking test module would.
HELD: list[Any] = []


@pytest.fixture
def nowhere() -> str:
    """A bootstrap address where nothing listens."""
    return f"127.0.0.1:{free_port()}"


def count_settles_at(expected: int) -> bool:
    """Whether live_handle_count() is ``expected`` (on top of :data:`BASE` when called from a
    test) within a few seconds: a thread a handle has just started bears its main thread's
    name until it names itself."""
    deadline = time.monotonic() + 5
    while live_handle_count() != expected:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


#: the handles alive before the running test (a session- or package-scoped fixture of this
#: worker, e.g. a shared cluster's admin client, may rightly hold some): the counts below are
#: the test's own on top of them
BASE = [0]


@pytest.fixture(autouse=True)
def handles_around() -> None:
    """The handles alive when the test starts, once unreachable ones are freed (BASE)."""
    gc.collect()
    BASE[0] = len(live_handles())
    assert count_settles_at(BASE[0])


def test_count_follows_creation_close_and_free(nowhere: str) -> None:
    producer = Producer({"bootstrap.servers": nowhere})
    admin = AdminClient({"bootstrap.servers": nowhere})
    consumer = Consumer({"bootstrap.servers": nowhere, "group.id": "g"})
    base = BASE[0]
    assert count_settles_at(base + 3)
    consumer.close()  # close destroys the handle at once
    assert count_settles_at(base + 2)
    del producer
    assert count_settles_at(base + 1)
    del admin
    assert live_handle_count() == base
    assert release_unreachable_handles() == base


def test_a_cycle_keeps_the_handle_until_released(nowhere: str) -> None:
    gc.disable()  # the collector must not run on its own between the steps below
    try:
        producer = Producer({"bootstrap.servers": nowhere})
        box: dict[str, Any] = {"producer": producer}
        box["self"] = box  # unreachable after the dels below, but freed only by the collector
        del producer, box
        assert count_settles_at(BASE[0] + 1)
        assert release_unreachable_handles() == BASE[0]
        assert live_handle_count() == BASE[0]
    finally:
        gc.enable()


def test_a_failed_future_keeps_its_admin_client_until_released(nowhere: str) -> None:
    """The cycle seen in the suite: the exception of a failed call holds the frames that hold
    the client."""

    def ask(bootstrap: str) -> None:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        try:
            admin.list_topics(timeout=0.2)
        except Exception as exc:  # noqa: BLE001 - which one librdkafka raises is not the point
            HELD.append(exc)  # what pytest does with a failed test's exception

    gc.disable()
    try:
        ask(nowhere)
        frame = HELD[0].__traceback__.tb_frame
        assert frame.f_code.co_name == "ask" and "admin" in frame.f_locals  # as a formatter does
        del frame
        assert count_settles_at(BASE[0] + 1)
        gc.collect()
        assert count_settles_at(BASE[0] + 1)  # still reachable, through HELD
        drop_exception_locals(HELD[0])
        assert release_unreachable_handles() == BASE[0]
        assert HELD[0].__traceback__ is not None  # the exception itself stays usable
    finally:
        HELD.clear()
        gc.enable()


def test_holders_are_named(nowhere: str) -> None:
    global LEAKED
    before = {id(h) for h in live_handles()}
    LEAKED = AdminClient({"bootstrap.servers": nowhere})
    try:
        handles = [h for h in live_handles() if id(h) not in before]
        assert [type(h) for h in handles] == [AdminClient]
        assert describe_holders(handles[0], ignore=[handles]) == [f"LEAKED of module {__name__}"]
        local = handles[0]
        HELD.append(local)
        lines = sorted(holders_seen_from_elsewhere(local, ignore=[handles]))
        assert lines[0] == f"LEAKED of module {__name__}", lines
        assert lines[1:] == ["a list"], lines  # HELD: a container has no name
        del local, handles
    finally:
        HELD.clear()
        LEAKED = None
    assert release_unreachable_handles() == BASE[0]


def holders_seen_from_elsewhere(obj: object, ignore: list[object]) -> list[str]:
    """describe_holders leaves its caller's frame out: call it from here to see the test's."""
    return describe_holders(obj, ignore=ignore)


#: Set by test_holders_are_named while it runs.
LEAKED: AdminClient | None = None
