"""Executor side: read one partition's offset range ``[start, end)`` as Arrow record batches.

The partition's raw record batches are fetched from its leader (:mod:`strom.spark.wire`, Fetch
v11, no consumer group, no offset commits) and each Fetch response becomes **one**
``pyarrow.RecordBatch``: the native record codec decodes all the response's kept batches into
Arrow column buffers in one pass (:func:`strom.protocol.records.decode_columns`), which
:func:`strom.spark.schema.arrow_from_columns` wraps without a copy. No Python object per
record.

What a Kafka consumer does with the batches, done here per batch (never per record):

* a batch wholly below the read position is skipped (a fetch returns the batch *containing*
  the fetch offset); records below the position or at/after ``end`` are left out by the codec;
* control batches (transaction markers) are never rows;
* under ``isolation.level=read_committed`` the Fetch names the aborted transactions (producer
  id, first offset); as Kafka's consumer does, a producer enters the aborted set when a batch
  reaching its first offset arrives and leaves it at its ABORT marker, and its transactional
  batches in between are skipped;
* compressed batches are decompressed with the bound the broker applies at append
  (:data:`strom.storage.batch_validation.MAX_UNCOMPRESSED_BATCH_BYTES`).

The position advances past every batch seen, rows or not. The range ends when the position
reaches ``end``, **or** a Fetch returns no batch while the partition's high watermark (last
stable offset under read_committed) is at or past ``end``: the last offsets of a range may hold
no record at all (removed by compaction, or a transaction marker). A position below the log
start (retention) is reported (``failOnDataLoss=true``, the default) or skipped to the log
start. A leader change or a broken connection looks the leader up again; no progress for
``kafkaConsumer.pollTimeoutMs`` fails the task with one readable line.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from strom.protocol import compression, records
from strom.protocol import record_batch as rb
from strom.protocol.control import parse_marker
from strom.protocol.errors import ErrorCode
from strom.spark.offsets import data_loss
from strom.spark.options import ReadOptions
from strom.spark.schema import arrow_from_columns
from strom.spark.wire import FetchedPartition, PartitionClient, PartitionError, WireError
from strom.storage.batch_validation import MAX_UNCOMPRESSED_BATCH_BYTES

log = logging.getLogger(__name__)

DEFAULT_PARTITION_FETCH_BYTES = 4 << 20  # kafka.max.partition.fetch.bytes sets it
FETCH_WAIT_MS = 500  # long poll while the range's end is not there yet
RETRY_BACKOFF_S = 0.2
MAX_FETCH_BYTES = 256 << 20  # a batch larger than the fetch size doubles it, up to this


class RangePartition(InputPartition):
    """One Spark task: records ``start`` (inclusive) to ``end`` (exclusive) of one partition."""

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__((topic, partition, start, end))
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end

    def at(self, start: int) -> RangePartition:
        """The same range from ``start`` on."""
        return RangePartition(self.topic, self.partition, start, self.end)

    def __repr__(self) -> str:
        return f"RangePartition({self.topic}-{self.partition} [{self.start}, {self.end}))"


def read_range(
    options: ReadOptions, part: RangePartition, schema: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``part`` as RecordBatches of ``schema``, in offset order."""
    if part.end <= part.start:
        return
    timeout = max(options.poll_timeout_ms / 1000.0, 10.0)
    client = PartitionClient(options.client, part.topic, part.partition, timeout)
    try:
        yield from RangeReader(options, part, schema, client).batches()
    finally:
        client.close()


class RangeReader:
    """The fetch loop of one range (module doc)."""

    def __init__(self, options: ReadOptions, part: RangePartition, schema: pa.Schema,
                 client: PartitionClient) -> None:  # fmt: skip
        self.options = options
        self.part = part
        self.schema = schema
        self.client = client
        self.read_committed = options.client.get("isolation.level") == "read_committed"
        self.headers = options.include_headers
        self.max_bytes = int(options.client.get("max.partition.fetch.bytes",
                                                DEFAULT_PARTITION_FETCH_BYTES))  # fmt: skip
        self.position = part.start

    def batches(self) -> Iterator[pa.RecordBatch]:
        part = self.part
        patience = self.options.poll_timeout_ms / 1000.0
        deadline = time.monotonic() + patience
        while self.position < part.end:
            try:
                fetched = self.client.fetch(self.position, max_wait_ms=FETCH_WAIT_MS,
                                            max_bytes=self.max_bytes,
                                            read_committed=self.read_committed)  # fmt: skip
                progress = self._handle(fetched)
            except (WireError, PartitionError) as exc:
                if isinstance(exc, PartitionError) and not exc.code.retriable:
                    raise RuntimeError(f"cannot read {part!r}: {exc}") from None
                log.info("reading %r: %s; looking the leader up again", part, exc)
                self.client.reset()
                progress = None
                time.sleep(RETRY_BACKOFF_S)
            if progress is not None:
                deadline = time.monotonic() + patience
                if isinstance(progress, pa.RecordBatch):
                    yield progress
                continue
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"no progress reading {part!r} for {patience:.0f}s (at offset "
                    f"{self.position}); is the broker reachable? (kafkaConsumer.pollTimeoutMs "
                    "sets this limit)"
                )

    def _handle(self, fetched: FetchedPartition) -> pa.RecordBatch | bool | None:
        """Act on one Fetch answer: a RecordBatch of rows, True for progress without rows,
        None for none (the caller waits)."""
        code = fetched.error
        if code == ErrorCode.offset_out_of_range:
            low = self.client.log_start()
            if self.position < low:
                data_loss(self.options.fail_on_data_loss,
                          f"offsets [{self.position}, {min(low, self.part.end)}) of "
                          f"{self.part.topic}-{self.part.partition} are gone: the log now "
                          f"starts at {low}")  # fmt: skip
                self.position = low
                return True
            time.sleep(RETRY_BACKOFF_S)  # above the log end (a truncated leader): wait
            return None
        if code != ErrorCode.none:
            raise PartitionError(code, f"fetch of {self.part!r}")
        start = self.position
        segments = self._segments(fetched)
        if self.position == start and fetched.records and self.max_bytes < MAX_FETCH_BYTES:
            self.max_bytes *= 2  # only part of a batch fits the fetch size (Kafka before KIP-74)
            return True
        if self.position == start:
            bound = fetched.last_stable_offset if self.read_committed else fetched.high_watermark
            if bound >= self.part.end:
                self.position = self.part.end  # nothing left in the range (module doc)
                return True
            return None
        if not segments:
            return True
        cols = records.decode_columns(segments, start, self.part.end, self.headers)
        if cols.rows == 0:
            return True
        return arrow_from_columns(cols, self.part.topic, self.part.partition, self.schema)

    def _segments(self, fetched: FetchedPartition) -> list[records.Segment]:
        """The batches of one Fetch answer that hold rows (module doc), as codec segments;
        advances the position past every whole batch."""
        data = fetched.records
        aborted = sorted(((first, pid) for pid, first in fetched.aborted), reverse=True)
        aborted_pids: set[int] = set()
        segments: list[records.Segment] = []
        for pos, header in rb.walk_headers(data):
            if header.magic != rb.MAGIC or header.batch_length < rb.MIN_BATCH_LENGTH:
                raise rb.CorruptRecordError(
                    f"{self.part!r}: not a v2 record batch at offset {header.base_offset}"
                )
            if pos + header.size > len(data):
                break  # a partial batch at the end of the answer: fetched again next time
            next_offset = header.next_offset
            if next_offset <= self.position:
                continue
            self.position = next_offset
            batch = memoryview(data)[pos : pos + header.size]
            if self.read_committed and header.producer_id >= 0:
                while aborted and aborted[-1][0] <= header.last_offset:
                    aborted_pids.add(aborted.pop()[1])
                if header.attributes & rb.CONTROL_BIT:
                    marker = parse_marker(batch)
                    if marker is not None and not marker.commit:
                        aborted_pids.discard(header.producer_id)
                    continue
                if header.attributes & rb.TRANSACTIONAL_BIT and header.producer_id in aborted_pids:
                    continue
            if header.attributes & rb.CONTROL_BIT or header.record_count <= 0:
                continue
            if header.attributes & rb.COMPRESSION_MASK == compression.NONE:
                segments.append((data, pos + rb.HEADER_SIZE, pos + header.size,
                                 header.record_count, header.base_offset, header.base_timestamp,
                                 header.timestamp_type, header.max_timestamp))  # fmt: skip
            else:
                segments.append(records.segment(header, batch, MAX_UNCOMPRESSED_BATCH_BYTES))
        return segments
