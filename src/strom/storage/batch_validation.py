"""The checks a record batch must pass before a :class:`strom.storage.log.Log` stores it.

Everything is decided from the 61-byte header and the CRC, except the one rule that needs the
records (null keys in compacted topics). In order, with the errors Kafka's ``LogValidator``
answers:

* ``max.message.bytes``: the whole batch (length prefix included) → RECORD_TOO_LARGE;
* CRC-32C over attributes..end → CORRUPT_MESSAGE;
* at least one record, and recordCount == lastOffsetDelta + 1 for client writes (replicated
  or compacted copies may have gaps, never more records than offsets) → INVALID_RECORD;
* compacted topics reject records with a null key (client writes) → INVALID_RECORD;
* CreateTime topics: ``message.timestamp.before.max.ms`` / ``after.max.ms`` against the
  broker's clock → INVALID_TIMESTAMP.

``assign_offsets`` False marks replication / internal copies, which skip the client rules.
"""

from __future__ import annotations

from strom.protocol import record_batch as rb
from strom.storage.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    RecordTooLargeError,
)
from strom.storage.log_config import LogConfig


def validate_batch(header: rb.BatchHeader, batch: memoryview, config: LogConfig, now_ms: int,
                   assign_offsets: bool) -> None:  # fmt: skip
    """Raise the storage error for the first rule (module doc) that ``batch`` breaks."""
    if header.size > config.max_message_bytes:
        raise RecordTooLargeError(
            f"batch of {header.size} bytes exceeds max.message.bytes {config.max_message_bytes}"
        )
    if not rb.verify_crc(batch):
        raise CorruptRecordError(f"CRC mismatch in batch at offset {header.base_offset}")
    if header.record_count < 1 or header.last_offset_delta < 0:
        raise InvalidRecordError("a batch must hold at least one record")
    if assign_offsets and header.record_count != header.last_offset_delta + 1:
        raise InvalidRecordError(
            f"record count {header.record_count} does not match lastOffsetDelta "
            f"{header.last_offset_delta}"
        )
    if header.record_count > header.last_offset_delta + 1:
        raise InvalidRecordError("more records than the batch's offset range")
    if assign_offsets and config.compact and not header.is_control:
        try:
            keys = [r.key for r in rb.decode_records(batch)]
        except rb.CorruptRecordError as exc:
            raise CorruptRecordError(str(exc)) from exc
        if any(k is None for k in keys):
            raise InvalidRecordError("compacted topic does not accept records with a null key")
    if assign_offsets and config.timestamp_type == rb.CREATE_TIME:
        too_new = header.max_timestamp - now_ms > config.message_timestamp_after_max_ms
        oldest = min(header.base_timestamp, header.max_timestamp)
        too_old = now_ms - oldest > config.message_timestamp_before_max_ms
        if too_new or too_old:
            raise InvalidTimestampError(
                f"timestamp {header.max_timestamp} is out of range (now {now_ms})"
            )
