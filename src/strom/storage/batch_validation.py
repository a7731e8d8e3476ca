"""The checks a record batch must pass before a :class:`strom.storage.log.Log` stores it.

What is checked depends on who appends (:class:`AppendOrigin`), as in Kafka's
``UnifiedLog.analyzeAndValidateRecords`` and ``LogValidator``:

Every origin (:func:`validate_shape`, header and CRC only):

* ``max.message.bytes``: the whole batch (length prefix included) → RECORD_TOO_LARGE;
* CRC-32C over attributes..end → CORRUPT_MESSAGE;
* never more records than offsets (recordCount <= lastOffsetDelta + 1) → INVALID_RECORD.

REPLICATION stops there: a follower stores what its leader wrote, including batches that
compaction left empty (recordCount 0) or with gaps in their offsets.

CLIENT and COORDINATOR appends (:func:`validate_records`) are validated fully:

* one batch per append (Kafka: "Compressed outer record has more than one batch");
* CLIENT only: baseOffset 0, no control batch ("Clients are not allowed to write control
  records"), a producer id comes with a sequence;
* at least one record and recordCount == lastOffsetDelta + 1;
* a compressed payload is decompressed with a bound, :data:`MAX_UNCOMPRESSED_BATCH_BYTES`, so
  a small compressed batch cannot make the broker allocate without limit; undecodable →
  CORRUPT_MESSAGE, too large → INVALID_RECORD;
* every record is walked without being decoded into objects
  (:func:`strom.protocol.records.scan_records`, native when built): varints, lengths, offset
  deltas 0..n-1, declared count, trailing bytes, header keys → INVALID_RECORD;
* per-record rules (KIP-467), all records checked, errors collected and raised together as
  :class:`RecordValidationError` with ``(batch index, message)`` pairs: a null key on a
  compacted topic (INVALID_RECORD), a CreateTime timestamp outside
  ``message.timestamp.before.max.ms`` / ``after.max.ms`` (or the deprecated
  ``difference.max.ms``) of the broker's clock (INVALID_TIMESTAMP), a client batch marked
  LogAppendTime (INVALID_TIMESTAMP). Any timestamp error makes the code INVALID_TIMESTAMP.

:func:`validate_records` returns the batch's true maxTimestamp (the largest record
timestamp), which the log writes into the header when the client's differs, as Kafka does.
"""

from __future__ import annotations

import enum
import struct

from kio.schema.errors import ErrorCode

from strom.protocol import compression, records
from strom.protocol import record_batch as rb
from strom.storage.errors import (
    CorruptRecordError,
    InvalidRecordError,
    RecordTooLargeError,
    RecordValidationError,
)
from strom.storage.log_config import LogConfig

MAX_UNCOMPRESSED_BATCH_BYTES = 64 * 1024 * 1024
"""Bound on a client batch's decompressed payload (Kafka streams records and needs none; strom
decompresses whole payloads). librdkafka's and the Java client's batches stay far below it."""

_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
_MAX_TS_POS, _CRC_POS = 35, 17  # byte offsets in the batch (protocol.batch_header)


class AppendOrigin(enum.Enum):
    """Who appends: decides how much :mod:`batch_validation` checks (Kafka's AppendOrigin)."""

    CLIENT = "client"  # a Produce request: everything is checked, offsets assigned
    COORDINATOR = "coordinator"  # the broker's own coordinators: as clients, control allowed
    REPLICATION = "replication"  # a follower copying its leader: offsets kept, shape only


def validate_shape(header: rb.BatchHeader, batch: rb.Buffer, config: LogConfig) -> None:
    """The checks every origin gets (module doc); raises the storage error."""
    size = header.batch_length + rb.LOG_OVERHEAD
    if size > config.max_message_bytes:
        raise RecordTooLargeError(
            f"batch of {size} bytes exceeds max.message.bytes {config.max_message_bytes}"
        )
    if header.crc != rb.compute_crc(batch):
        raise CorruptRecordError(f"record is corrupt (CRC mismatch) in batch at offset "
                                 f"{header.base_offset}")  # fmt: skip
    if header.record_count < 0 or header.last_offset_delta < 0:
        raise InvalidRecordError(
            f"invalid record count {header.record_count} / offset delta {header.last_offset_delta}"
        )
    if header.record_count > header.last_offset_delta + 1:
        raise InvalidRecordError("more records than the batch's offset range")


def validate_records(header: rb.BatchHeader, batch: rb.Buffer, config: LogConfig, now_ms: int,
                     origin: AppendOrigin) -> tuple[int, int]:  # fmt: skip
    """The full checks of a CLIENT or COORDINATOR batch (module doc), after
    :func:`validate_shape`. Returns the batch's maxTimestamp as its records say, and the
    sum of its records' value lengths (for the broker's value-bytes metric).

    ``batch`` is the whole batch; given as ``bytes``, uncompressed records are walked in place
    (no copy of them)."""
    # the header's fields unpacked once: its properties cost a call each
    (base_offset, _, _, _, _, attributes, delta, base, client_max_ts, pid, _, seq,
     count) = header  # fmt: skip
    control = attributes & rb.CONTROL_BIT
    if origin is AppendOrigin.CLIENT:
        if base_offset != 0:
            raise InvalidRecordError(
                f"the baseOffset of the record batch should be 0, but it is {base_offset}"
            )
        if control:
            raise InvalidRecordError("clients are not allowed to write control records")
        if pid >= 0 and seq < 0:
            raise InvalidRecordError(
                f"invalid sequence number {seq} in record batch with producerId {pid}"
            )
    if count <= 0:
        raise InvalidRecordError(f"invalid reported count for record batch: {count}")
    if count != delta + 1:
        raise InvalidRecordError(
            f"inconsistent batch offset range [0, {delta}] and count of records {count}"
        )
    payload: rb.Buffer = batch
    start = rb.HEADER_SIZE
    codec = attributes & rb.COMPRESSION_MASK
    if codec != compression.NONE:
        start = 0
        try:
            payload = compression.decompress(codec, memoryview(batch)[rb.HEADER_SIZE :],
                                             MAX_UNCOMPRESSED_BATCH_BYTES)  # fmt: skip
        except compression.DecompressedTooLargeError as exc:
            raise InvalidRecordError(str(exc)) from exc
        except compression.CompressionCodecError as exc:
            raise CorruptRecordError(str(exc)) from exc
    log_append_batch = bool(attributes & rb.TIMESTAMP_TYPE_BIT)
    if config.timestamp_type == rb.CREATE_TIME and not log_append_batch:
        low = now_ms - config.timestamp_before_max_ms - base
        high = now_ms + config.timestamp_after_max_ms - base
    else:
        low, high = _LONG_MIN, _LONG_MAX
    try:
        scan = records.scan_records(payload, count, low, high, -1 - base,
                                    config.compact and not control, start)  # fmt: skip
    except rb.InvalidRecordError as exc:
        raise InvalidRecordError(str(exc)) from exc
    errors: list[tuple[int, str]] = []
    timestamp_error = False
    if log_append_batch:
        errors.extend((i, "Invalid timestamp type in message: producer should not set timestamp "
                       "type to LogAppendTime") for i in range(count))  # fmt: skip
        timestamp_error = True
    elif scan.bad_timestamps:
        timestamp_error = True
        lo, hi = now_ms - config.timestamp_before_max_ms, now_ms + config.timestamp_after_max_ms
        errors.extend((i, f"Timestamp of message with offset delta {i} is out of range. The "
                       f"timestamp should be within [{lo}, {hi}]")
                      for i in scan.bad_timestamps)  # fmt: skip
    if scan.null_keys:
        errors.extend((i, "Compacted topic cannot accept message without key")
                      for i in scan.null_keys)  # fmt: skip
    if errors:
        errors.sort()
        if timestamp_error:
            raise RecordValidationError(
                ErrorCode.invalid_timestamp,
                "One or more records have been rejected due to invalid timestamp", errors,
            )  # fmt: skip
        shown = ", ".join(f"{i}: {m}" for i, m in errors[:3])
        raise RecordValidationError(
            ErrorCode.invalid_record,
            f"One or more records have been rejected due to {len(errors)} record errors in "
            f"total, and only showing the first three errors at most: [{shown}]", errors,
        )  # fmt: skip
    if log_append_batch:
        return client_max_ts, scan.value_bytes
    return base + scan.max_timestamp_delta, scan.value_bytes


def patch_max_timestamp(buf: bytearray, pos: int, max_timestamp: int) -> None:
    """Rewrite the maxTimestamp of the batch at ``pos`` and its CRC (inside the CRC range)."""
    struct.pack_into(">q", buf, pos + _MAX_TS_POS, max_timestamp)
    (length,) = struct.unpack_from(">i", buf, pos + 8)
    batch = memoryview(buf)[pos : pos + length + rb.LOG_OVERHEAD]
    struct.pack_into(">I", buf, pos + _CRC_POS, rb.compute_crc(batch))
