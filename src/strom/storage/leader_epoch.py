"""A partition's leader-epoch cache: which leader epoch started at which offset.

File ``leader-epoch-checkpoint`` in the partition directory, Kafka's
``LeaderEpochCheckpointFile`` format (text)::

    0                  version
    2                  number of entries
    0 0                epoch start-offset, ascending in both
    3 1200

An entry is added when a batch with a newer partitionLeaderEpoch is appended (the leader
stamps its epoch on every batch; a follower copies the leader's); entries above a truncation
point are removed, and entries below the log start offset collapse into the first one. The
file is rewritten (temp file, fsync, rename) on every truncation (from the end at once; from
the start, for retention and DeleteRecords, by the log's flusher thread); a new epoch
(:meth:`assign`, on the append path) is only written by the next :meth:`flush` (the log's
flush or roll, queued on the flusher before the recovery point moves past it; or close), as Kafka does since KAFKA-15046: an fsync per partition on its first
append stalled the event loop for seconds with thousands of partitions. A crash before that
flush loses the entry from the file, never from the log: recovery re-assigns the epochs of
the batches it re-validates (:meth:`strom.storage.log.Log.open`), and a missing file is
rebuilt from the batches.

This is the seam replication uses: a follower asks its leader :meth:`end_offset_for` its own
latest epoch (OffsetForLeaderEpoch) to find where their logs diverge. Consumers ask it after a
seek or reset to detect log truncation.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from strom.storage import atomic_file

FILE_NAME = "leader-epoch-checkpoint"
Submit = Callable[[Callable[[], None]], object]
UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


class LeaderEpochCache:
    """(epoch, start offset) entries of one partition, persisted in :data:`FILE_NAME`."""

    def __init__(self, dir: Path) -> None:
        self.path = dir / FILE_NAME
        self._epochs: list[int] = []
        self._starts: list[int] = []
        self._dirty = False  # entries not yet in the file (nor queued for it)
        self._write_lock = threading.Lock()
        self._version = 0  # of the entries, bumped by every change written
        self._written_version = 0

    # --- persistence ------------------------------------------------------------------------

    def load(self) -> bool:
        """Read the file; False (and an empty cache) when it is missing or unreadable."""
        self._epochs, self._starts = [], []
        try:
            lines = self.path.read_text().split("\n")
            if lines[0].strip() != "0":
                return False
            count = int(lines[1])
            entries = [tuple(int(x) for x in line.split()) for line in lines[2 : 2 + count]]
            if len(entries) != count or any(len(e) != 2 for e in entries):
                return False
        except (OSError, ValueError, IndexError):
            return False
        for epoch, start in entries:
            self._append(epoch, start)
        return True

    def _write(self, submit: Submit | None = None, *, sync: bool = True) -> None:
        """Rewrite the file now, or (``submit``, e.g. the log's flusher) the current entries
        later, off the caller's thread, in submission order. ``sync=False``: no fsync (the
        caller syncs the file system itself, e.g. a clean shutdown's one ``syncfs``)."""
        body = "".join(f"{e} {s}\n" for e, s in self.entries())
        text = f"0\n{len(self._epochs)}\n{body}"
        self._version += 1
        self._dirty = False
        version = self._version
        if submit is None:
            self._write_version(version, text, sync)
        else:
            submit(lambda: self._write_version(version, text, sync))

    def _write_version(self, version: int, text: str, sync: bool = True) -> None:
        """Write ``text`` unless a newer version is already in the file (a synchronous write
        may overtake a queued one)."""
        with self._write_lock:
            if version <= self._written_version:
                return
            _write_file(self.path, text, sync)
            self._written_version = version

    def flush(self, submit: Submit | None = None, *, sync: bool = True) -> None:
        """Write entries :meth:`assign` / :meth:`rebuild` added since the last write: now, or
        queued through ``submit`` (the log's flusher, before the recovery point that covers
        them moves); fsynced unless ``sync=False``."""
        if self._dirty:
            self._write(submit, sync=sync)

    @property
    def dirty(self) -> bool:
        """Entries exist that the file does not hold (nor has queued) yet."""
        return self._dirty

    def rebuild(self, batches: Iterable[tuple[int, int]]) -> None:
        """Recreate from ``(partitionLeaderEpoch, base offset)`` of the log's batches."""
        self._epochs, self._starts = [], []
        for epoch, base in batches:
            if epoch >= 0 and (not self._epochs or epoch > self._epochs[-1]):
                self._append(epoch, base)
        self._dirty = True  # written at the next flush, like a new epoch

    # --- queries ----------------------------------------------------------------------------

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._starts, strict=True))

    @property
    def latest_epoch(self) -> int:
        return self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch that wrote ``offset`` (the last entry starting at or before it), or -1."""
        i = bisect.bisect_right(self._starts, offset) - 1
        return self._epochs[i] if i >= 0 else UNDEFINED_EPOCH

    def end_offset_for(self, epoch: int, log_end_offset: int,
                       leader_epoch: int = UNDEFINED_EPOCH) -> tuple[int, int]:  # fmt: skip
        """Kafka's ``LeaderEpochFileCache.endOffsetFor``: ``(epoch, end offset)`` where the end
        offset is the start of the first epoch after ``epoch`` (the log end offset for the
        latest one) and the epoch is the largest known one <= ``epoch``. Unknown (-1, -1)
        when ``epoch`` is -1 or above every known epoch; ``(epoch, first start)`` when below
        every known epoch.

        ``leader_epoch``: the epoch this node leads in. Kafka records it in the cache at the
        election; strom's single node never writes it before the first batch, so when it is
        newer than the latest entry it counts as starting at the log end offset.
        """
        epochs, starts = self._epochs, self._starts
        if leader_epoch > self.latest_epoch:
            epochs, starts = [*epochs, leader_epoch], [*starts, log_end_offset]
        if epoch == UNDEFINED_EPOCH or not epochs:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if epoch == epochs[-1]:
            return epoch, log_end_offset
        higher = bisect.bisect_right(epochs, epoch)
        if higher >= len(epochs):
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if higher == 0:
            return epoch, starts[0]
        return epochs[higher - 1], starts[higher]

    # --- changes ----------------------------------------------------------------------------

    def _append(self, epoch: int, start: int) -> None:
        self._epochs.append(epoch)
        self._starts.append(start)

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset`` (no-op unless newer than the
        latest epoch); written to the file at the next :meth:`flush`."""
        if epoch < 0 or (self._epochs and epoch <= self._epochs[-1]):
            return
        if self._starts and start_offset < self._starts[-1]:
            self.truncate_from_end(start_offset)
        self._append(epoch, start_offset)
        self._dirty = True

    def truncate_from_end(self, end_offset: int) -> None:
        """Forget epochs starting at or after ``end_offset`` (the log was truncated there)."""
        keep = bisect.bisect_left(self._starts, end_offset)
        if keep < len(self._starts):
            del self._epochs[keep:], self._starts[keep:]
            self._write()

    def truncate_from_start(self, start_offset: int, submit: Submit | None = None) -> None:
        """The log now starts at ``start_offset``: entries wholly below it go, the one that
        covers it starts there (Kafka's ``truncateFromStart``). With ``submit`` the file is
        written later (retention and DeleteRecords must not wait on the disk; a lost write
        only leaves an older start, which opening the log fits again)."""
        covering = bisect.bisect_right(self._starts, start_offset) - 1
        if covering < 0 or (covering == 0 and self._starts[0] == start_offset):
            return
        del self._epochs[:covering], self._starts[:covering]
        self._starts[0] = start_offset
        self._write(submit)


def _write_file(path: Path, text: str, sync: bool = True) -> None:
    """Temp file, fsync (unless ``sync=False``), rename."""
    atomic_file.replace(path, text.encode(), fsync=sync)
