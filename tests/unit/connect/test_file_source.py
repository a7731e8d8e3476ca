"""FileStreamSourceTask without a worker: complete lines only, batches, exact byte positions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from strom.connect.api import SourceTaskContext
from strom.connect.file import FileStreamSourceTask


def task_on(path: Path, stored: dict[str, Any] | None = None, batch: int = 3
            ) -> FileStreamSourceTask:
    task = FileStreamSourceTask()
    task.initialize(SourceTaskContext(lambda p: stored if p == {"filename": str(path)}
                                      else None))
    task.start({"file": str(path), "topic": "t", "batch.size": str(batch)})
    return task


def test_batches_of_complete_lines_with_exact_positions(tmp_path: Path) -> None:
    path = tmp_path / "in.txt"
    path.write_bytes(b"a\r\nbb\n\nccc\ndd\xc3\xa9\nee")  # "ee" is not a complete line yet
    task = task_on(path)
    try:
        first = task.poll() or []
        assert [(r.value, r.source_offset) for r in first] == [
            ("a", {"position": 3}), ("bb", {"position": 6}), ("", {"position": 7})]
        assert all(r.source_partition == {"filename": str(path)} and r.topic == "t"
                   for r in first)
        second = task.poll() or []
        assert [(r.value, r.source_offset) for r in second] == [
            ("ccc", {"position": 11}), ("ddé", {"position": 16})]
        assert task.poll() is None  # only the partial "ee"
        with open(path, "ab") as f:
            f.write(b"e\nf\n")
        assert [(r.value, r.source_offset) for r in task.poll() or []] == [
            ("eee", {"position": 20}), ("f", {"position": 22})]
    finally:
        task.stop()


def test_resumes_after_the_stored_position(tmp_path: Path) -> None:
    path = tmp_path / "in.txt"
    path.write_bytes(b"one\ntwo\nthree\n")
    task = task_on(path, stored={"position": 4}, batch=10)
    try:
        assert [r.value for r in task.poll() or []] == ["two", "three"]
    finally:
        task.stop()
