"""``atomic_file.replace`` leaves the new contents and no temp file; the checkpoint formats
written through it are byte for byte what they were (text, Kafka's layout)."""

from __future__ import annotations

from pathlib import Path

from strom.storage import atomic_file, checkpoint, cleaner, log_dir


def test_replace_overwrites_and_leaves_no_temp_file(tmp_path: Path) -> None:
    path = tmp_path / "f"
    (tmp_path / "f.tmp").write_bytes(b"left by a crash")
    atomic_file.replace(path, b"one", fsync_parent=True)
    atomic_file.replace(path, b"two", fsync=False)
    assert path.read_bytes() == b"two"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]
    atomic_file.fsync_path(path)
    atomic_file.fsync_path(tmp_path)


def test_checkpoint_files_keep_their_bytes(tmp_path: Path) -> None:
    checkpoint.write_offset(tmp_path / "one", 1234)
    assert (tmp_path / "one").read_bytes() == b"0\n1234\n"
    offsets = {("b", 1): 98, ("a", 0): 7}
    log_dir.write_offsets(tmp_path / "many", offsets)
    assert (tmp_path / "many").read_bytes() == b"0\n2\na 0 7\nb 1 98\n"
    cleaner.write_checkpoint(tmp_path, offsets)
    assert (tmp_path / cleaner.CHECKPOINT_FILE).read_bytes() == b"0\n2\na 0 7\nb 1 98\n"
    assert cleaner.read_checkpoint(tmp_path) == offsets == log_dir.read_offsets(tmp_path / "many")
