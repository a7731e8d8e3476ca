"""The embedded metadata store: journal written off the caller's thread, in order, crash-safe."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from pathlib import Path

import pytest

from strom.metadata import embedded
from strom.metadata.embedded import FILE_NAME, JOURNAL_NAME, EmbeddedStore
from strom.metadata.store import NoNodeError


def test_changes_survive_a_crash_once_durable(tmp_path: Path) -> None:
    store = EmbeddedStore(tmp_path)
    store.create("/a/b", b"1")
    store.set("/a/b", b"2")
    store.create("/a/c", b"x")
    store.delete("/a/c")
    assert store.wait_durable(10)
    # no close: what a kill -9 leaves is the snapshot (absent here) plus the journal
    again = EmbeddedStore(tmp_path)
    assert again.get("/a/b") == (b"2", 1)
    assert again.exists("/a/c") is None
    assert again.children("/a") == ["b"]
    again.close()
    store.close()


def test_a_torn_journal_line_is_cut_and_the_rest_replays(tmp_path: Path) -> None:
    store = EmbeddedStore(tmp_path)
    store.create("/x", b"ok")
    assert store.wait_durable(10)
    store.close()
    with open(tmp_path / JOURNAL_NAME, "a") as fh:  # close compacted; then a crash mid-append
        fh.write(json.dumps({"p": "/y", "d": "AA==", "v": 0}) + "\n")
        fh.write('{"p": "/z", "d": "AA')
    again = EmbeddedStore(tmp_path)
    assert again.get("/x")[0] == b"ok" and again.exists("/y") == 0 and again.exists("/z") is None
    assert (tmp_path / JOURNAL_NAME).read_bytes().endswith(b"\n")
    again.close()


def test_close_compacts_into_the_snapshot(tmp_path: Path) -> None:
    store = EmbeddedStore(tmp_path)
    for i in range(50):
        store.create(f"/n{i}", b"v")
    store.close()
    assert (tmp_path / JOURNAL_NAME).stat().st_size == 0
    doc = json.loads((tmp_path / FILE_NAME).read_text())
    assert len([p for p in doc["nodes"] if p.startswith("/n")]) == 50


def test_journal_compacts_when_it_outgrows_the_snapshot(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(embedded, "_MIN_COMPACT_BYTES", 1000)
    store = EmbeddedStore(tmp_path)
    store.create("/big", b"0")
    for i in range(200):
        store.set("/big", b"%d" % i)
    assert store.wait_durable(10)
    assert (tmp_path / JOURNAL_NAME).stat().st_size < 1000 * 3
    again = EmbeddedStore(tmp_path)
    assert again.get("/big") == (b"199", 200)
    again.close()
    store.close()


def test_writes_do_not_wait_for_the_disk_but_durable_does(tmp_path: Path, monkeypatch) -> None:
    gate = threading.Event()
    real_fsync = os.fsync

    def slow_fsync(fd: int) -> None:
        gate.wait(10)
        real_fsync(fd)

    store = EmbeddedStore(tmp_path)
    monkeypatch.setattr(embedded.os, "fsync", slow_fsync)

    async def scenario() -> None:
        started = time.monotonic()
        store.create("/t", b"1")  # returns at once: the writer thread is stuck in fsync
        assert time.monotonic() - started < 1
        assert store.get("/t") == (b"1", 0)
        waiter = asyncio.ensure_future(store.durable())
        await asyncio.sleep(0.05)
        assert not waiter.done()
        gate.set()
        await asyncio.wait_for(waiter, 10)

    asyncio.run(scenario())
    monkeypatch.setattr(embedded.os, "fsync", real_fsync)
    store.close()
    with pytest.raises(NoNodeError):
        EmbeddedStore(tmp_path).get("/missing")
