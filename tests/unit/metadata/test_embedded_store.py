"""The embedded metadata store: journal written off the caller's thread, in order, crash-safe,
backward compatible with data dirs written before ``Stat.created`` existed."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from pathlib import Path

import pytest

from strom.metadata import journal
from strom.metadata.embedded import FILE_NAME, JOURNAL_NAME, EmbeddedStore
from strom.metadata.store import NoNodeError


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def test_changes_survive_a_crash_once_durable(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = EmbeddedStore(tmp_path)
        await store.create("/a/b", b"1")
        await store.set("/a/b", b"2")
        await store.create("/a/c", b"x")
        await store.delete("/a/c")
        # no close: what a kill -9 leaves is the snapshot (absent here) plus the journal
        again = EmbeddedStore(tmp_path)
        data, stat = await again.get("/a/b")
        assert (data, stat.version) == (b"2", 1)
        assert await again.exists("/a/c") is None
        assert await again.children("/a") == ["b"]
        assert (await again.get("/a"))[1].children_version == 3  # b, c added; c removed
        await again.close()
        await store.close()

    run(scenario())


def test_a_torn_journal_line_is_cut_and_the_rest_replays(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = EmbeddedStore(tmp_path)
        await store.create("/x", b"ok")
        await store.close()
        with open(tmp_path / JOURNAL_NAME, "a") as fh:  # close compacted; then a crash mid-append
            fh.write(json.dumps({"p": "/y", "d": "AA==", "v": 0}) + "\n")
            fh.write('{"p": "/z", "d": "AA')
        again = EmbeddedStore(tmp_path)
        assert (await again.get("/x"))[0] == b"ok"
        y = await again.exists("/y")
        assert y is not None and y.version == 0
        assert await again.exists("/z") is None
        assert (tmp_path / JOURNAL_NAME).read_bytes().endswith(b"\n")
        await again.close()

    run(scenario())


def test_close_compacts_into_the_snapshot(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = EmbeddedStore(tmp_path)
        await asyncio.gather(*(store.create(f"/n{i}", b"v") for i in range(50)))
        await store.close()

    run(scenario())
    assert (tmp_path / JOURNAL_NAME).stat().st_size == 0
    doc = json.loads((tmp_path / FILE_NAME).read_text())
    assert len([p for p in doc["nodes"] if p.startswith("/n")]) == 50
    assert doc["zxid"] == 50


def test_journal_compacts_when_it_outgrows_the_snapshot(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(journal, "_MIN_COMPACT_BYTES", 1000)

    async def scenario() -> None:
        store = EmbeddedStore(tmp_path)
        await store.create("/big", b"0")
        for i in range(200):
            await store.set("/big", b"%d" % i)
        assert (tmp_path / JOURNAL_NAME).stat().st_size < 1000 * 3
        again = EmbeddedStore(tmp_path)
        data, stat = await again.get("/big")
        assert (data, stat.version, stat.created) == (b"199", 200, 1)
        await again.close()
        await store.close()

    run(scenario())


def test_writes_return_when_durable_sharing_one_fsync(tmp_path: Path, monkeypatch) -> None:
    gate = threading.Event()
    real_fsync = os.fsync
    calls = []

    def slow_fsync(fd: int) -> None:
        calls.append(fd)
        gate.wait(10)
        real_fsync(fd)

    store = EmbeddedStore(tmp_path)
    monkeypatch.setattr(journal.os, "fsync", slow_fsync)

    async def scenario() -> None:
        started = time.monotonic()
        first = asyncio.ensure_future(store.create("/t", b"1"))
        await asyncio.sleep(0.05)  # the writer thread is now stuck in the first fsync
        rest = [asyncio.ensure_future(store.create(f"/t{i}", b"1")) for i in range(20)]
        await asyncio.sleep(0.05)
        assert time.monotonic() - started < 5
        assert (await store.get("/t"))[0] == b"1"  # visible at once, before it is durable
        assert not first.done() and not any(r.done() for r in rest)
        gate.set()
        await asyncio.wait_for(asyncio.gather(first, *rest), 10)
        assert len(calls) <= 3  # 21 writes, at most a few fsyncs (group commit)

    run(scenario())
    monkeypatch.setattr(journal.os, "fsync", real_fsync)
    run(store.close())

    async def reopen() -> None:
        again = EmbeddedStore(tmp_path)
        with pytest.raises(NoNodeError):
            await again.get("/missing")
        assert len(await again.children("/")) == 21
        await again.close()

    run(reopen())


def test_an_old_data_dir_loads_and_gets_created_numbers(tmp_path: Path) -> None:
    """The format before Stat.created: no zxid, created, c or z anywhere."""
    (tmp_path / FILE_NAME).write_text(json.dumps({"format": 1, "nodes": {
        "/brokers": {"data": "", "version": 0},
        "/brokers/topics": {"data": "", "version": 0},
        "/brokers/topics/a": {"data": "e30=", "version": 2},
    }}))  # fmt: skip
    (tmp_path / JOURNAL_NAME).write_text(
        json.dumps({"p": "/brokers/topics/b", "d": "e30=", "v": 0}) + "\n"
        + json.dumps({"p": "/brokers/topics/a", "d": "e30=", "v": 3}) + "\n"
    )

    async def scenario() -> tuple[int, int, int]:
        store = EmbeddedStore(tmp_path)
        a = (await store.get("/brokers/topics/a"))[1]
        b = (await store.get("/brokers/topics/b"))[1]
        assert a.version == 3 and a.created == 3 and b.created == 4
        assert await store.children("/brokers/topics") == ["a", "b"]
        c = await store.create("/brokers/topics/c")
        assert c.created > b.created
        await store.close()
        return a.created, b.created, c.created

    first = run(scenario())

    async def again() -> tuple[int, int, int]:
        store = EmbeddedStore(tmp_path)
        out = tuple([(await store.get(f"/brokers/topics/{t}"))[1].created for t in "abc"])
        await store.close()
        return out  # type: ignore[return-value]

    assert run(again()) == first


def test_created_never_goes_back_across_restarts_even_for_ephemerals(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = EmbeddedStore(tmp_path)
        one = await store.create("/brokers/ids/1", b"x", ephemeral=True)
        assert one.ephemeral_owner == store.session_id != 0
        # a kill -9: no close; a new process sees the node gone and a higher number
        again = EmbeddedStore(tmp_path)
        assert await again.exists("/brokers/ids/1") is None
        two = await again.create("/brokers/ids/1", b"x", ephemeral=True)
        assert two.created > one.created
        await again.close()
        await store.close()

    run(scenario())
