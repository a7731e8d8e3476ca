"""Replay of an internal topic's partition log: the records a coordinator rebuilds its state from.

The group coordinator (``__consumer_offsets``) and the transaction coordinator
(``__transaction_state``) both load a partition when this broker becomes its leader by walking
its log from the log start offset to a bound, record by record, as Kafka's
``loadGroupsForPartition`` / ``loadTransactionsForTxnTopicPartition`` do. :func:`replay` is that
walk, once.

Invariants:
- entries come in offset order, each offset at most once, none below the start offset nor at or
  past ``end`` (batches straddling the bound yield only their records below it; a batch that
  holds a record below the start is read whole, its earlier records skipped);
- records without a key are skipped (an internal topic's records are all keyed; a null key
  means nothing to replay);
- a control batch yields one entry with ``marker`` set (``None`` for a control record that is
  not a transaction marker), and only when ``controls`` is true; its ``key`` and ``value`` are
  ``None``;
- the log is read in chunks of at most ``chunk_bytes`` (at least one whole batch each), so the
  memory held is bounded by the chunk, not by the partition. The walk is synchronous: a caller
  that loads on the event loop blocks it for the whole replay, exactly as it did before this
  module existed (the group coordinator wants that: no request may see a half-loaded partition).

Aborted transactional data is NOT dropped here: the group coordinator keeps transactional
offset commits pending until their marker (:attr:`ReplayEntry.marker`) says commit or abort,
and the transaction coordinator's log holds no transactional batches.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, NamedTuple

from strom.protocol import record_batch as rb
from strom.protocol.batch_header import BatchHeader
from strom.protocol.control import Marker, parse_marker

if TYPE_CHECKING:
    from strom.storage.log import Log

CHUNK_BYTES = 1 << 20  # one read's bytes (a batch larger than this is still read whole)


class ReplayEntry(NamedTuple):
    """One record (or one control batch) of the replayed log."""

    offset: int
    key: bytes | None  # None only for a control batch's entry
    value: bytes | None  # None for a tombstone (and a control batch's entry)
    header: BatchHeader  # its batch's header: producer id, transactional and control flags
    marker: Marker | None = None  # the transaction marker of a control batch

    @property
    def is_control(self) -> bool:
        return self.header.is_control


def replay(log_: Log, *, end: int | None = None, controls: bool = False,
           chunk_bytes: int = CHUNK_BYTES) -> Iterator[ReplayEntry]:  # fmt: skip
    """The entries of ``log_`` from its log start offset up to ``end`` (exclusive; the log end
    offset when None: a new leader's log is the truth its followers truncate to, so the
    coordinators load all of it, not only up to the high watermark).

    Raises what :func:`strom.protocol.record_batch.iter_batches` / ``decode_records`` raise on
    a corrupt batch; the caller decides whether a partition that cannot be read is loaded."""
    offset = log_.log_start_offset
    bound = log_.log_end_offset if end is None else end
    while offset < bound:
        data = log_.read(offset, chunk_bytes).records
        if not data:
            break
        for header, batch in rb.iter_batches(data):
            if header.next_offset <= offset:
                continue  # wholly below where this read began
            if header.base_offset >= bound:
                return
            if header.is_control:
                if controls:
                    yield ReplayEntry(header.base_offset, None, None, header, parse_marker(batch))
            else:
                for record in rb.decode_records(batch):
                    if record.offset < offset or record.offset >= bound or record.key is None:
                        continue
                    yield ReplayEntry(record.offset, record.key, record.value, header)
            offset = header.next_offset
