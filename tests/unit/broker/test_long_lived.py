"""Partitions made in bulk stay out of the cyclic garbage collector's work (issue 29): their
objects are frozen once registered, so a later collection does not examine them (counted:
the collector's tracked objects, not timed), automatic collections are paused while they are
made, and deleting the partitions still frees them (reference counting, no collection)."""

from __future__ import annotations

import asyncio
import gc
import shutil
import tempfile
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from strom import long_lived
from strom.broker.assembly import Broker
from strom.config import BrokerConfig
from strom.testing import free_port


@pytest.fixture(autouse=True)
def collector() -> Iterator[None]:
    """The collector as it was, whatever a test froze or paused."""
    enabled = gc.isenabled()
    yield
    gc.unfreeze()
    if enabled:
        gc.enable()
    else:
        gc.disable()


@pytest.fixture
def tmp() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="strom-longlived-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_bulk_pauses_collections_only_for_many_partitions() -> None:
    gc.enable()
    with long_lived.bulk(long_lived.BULK - 1):
        assert gc.isenabled()
    with long_lived.bulk(long_lived.BULK):
        assert not gc.isenabled()
        with long_lived.bulk(long_lived.BULK * 3):  # two at once: the outer one restores
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()  # paused by someone else before: stays paused after
    with long_lived.bulk(long_lived.BULK):
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_bulk_restores_collections_after_an_error() -> None:
    gc.enable()
    with pytest.raises(RuntimeError), long_lived.bulk(long_lived.BULK):
        raise RuntimeError("creating the logs failed")
    assert gc.isenabled()


def test_added_freezes_once_enough_partitions_were_added(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(long_lived, "BULK", 10)
    monkeypatch.setattr(long_lived, "_added", 0)
    gc.unfreeze()
    before = long_lived.freezes
    kept = [object(), [1, 2], {"a": []}]  # tracked containers made before the freeze
    assert not long_lived.added(4)
    assert gc.get_freeze_count() == 0
    assert not long_lived.added(5)
    assert long_lived.added(1)  # 10 since the last freeze
    assert long_lived.freezes == before + 1
    tracked = {id(o) for o in gc.get_objects()}
    assert id(kept[1]) not in tracked and id(kept[2]) not in tracked
    assert gc.get_freeze_count() > 0
    assert not long_lived.added(9)  # counting starts again


def test_a_bulk_topic_is_frozen_and_still_freed_when_deleted(
    tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(long_lived, "BULK", 40)
    monkeypatch.setattr(long_lived, "_added", 0)

    async def body() -> None:
        broker = Broker(BrokerConfig({"log.cleaner.enable": "false", "strom.admin.listener": ""}),
                        tmp / "data", ("127.0.0.1", free_port()))  # fmt: skip
        await broker.start()
        services = broker.services
        assert services is not None
        try:
            gc.unfreeze()
            await services.topics.create("small", 3, 1, {})  # fewer than BULK: nothing frozen
            assert gc.get_freeze_count() == 0
            frozen = long_lived.freezes
            await services.topics.create("wide", 60, 1, {})
            assert long_lived.freezes == frozen + 1
            logs = [services.replicas.get_log("wide", p) for p in range(60)]
            parts = [services.replicas.partitions[("wide", p)] for p in range(60)]
            # what a collection examines: none of the new partitions' objects
            tracked = {id(o) for o in gc.get_objects()}
            assert not any(id(x) in tracked for x in [*logs, *parts])
            assert not any(id(s) in tracked for x in logs for s in x.segments)
            refs = [weakref.ref(x) for x in logs]
            del logs, parts
            gc.disable()  # whatever frees them below, it is not the cyclic collector
            info = services.topics.get("wide")
            assert info is not None
            await services.topics.lifecycle.delete(info)
            await asyncio.sleep(0.05)
            assert [r for r in refs if r() is not None] == []
        finally:
            gc.enable()
            await broker.stop()

    asyncio.run(body())


def test_start_up_freezes_the_logs_it_opened(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(long_lived, "BULK", 40)

    async def run(create: bool) -> Any:
        broker = Broker(BrokerConfig({"log.cleaner.enable": "false", "strom.admin.listener": ""}),
                        tmp / "data", ("127.0.0.1", free_port()))  # fmt: skip
        monkeypatch.setattr(long_lived, "_added", 0)
        gc.unfreeze()
        await broker.start()
        services = broker.services
        assert services is not None
        try:
            if create:
                await services.topics.create("wide", 60, 1, {})
                return None
            tracked = {id(o) for o in gc.get_objects()}
            return [id(services.replicas.get_log("wide", p)) in tracked for p in range(60)]
        finally:
            await broker.stop()

    asyncio.run(run(create=True))
    assert asyncio.run(run(create=False)) == [False] * 60
