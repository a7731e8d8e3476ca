"""Storage exceptions, each carrying the Kafka wire ``error_code`` a handler should answer with.

Handlers catch :class:`StorageError` and answer ``exc.error_code``. The record-format errors
also subclass the codec's own classes in :mod:`strom.protocol.record_batch`, so
``except record_batch.CorruptRecordError`` catches both the codec's and the storage's.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from strom.protocol import record_batch as _rb


class StorageError(Exception):
    """Base of every storage error; ``error_code`` is the wire error code."""

    error_code: ErrorCode = ErrorCode.unknown_server_error


class CorruptRecordError(StorageError, _rb.CorruptRecordError):
    """Malformed batch: truncated, bad magic, bad length, bad CRC."""

    error_code = ErrorCode.corrupt_message


class InvalidRecordError(StorageError, _rb.InvalidRecordError):
    """Well-formed batch that breaks a rule (no records, inconsistent offsets, ...)."""

    error_code = ErrorCode.invalid_record


class RecordTooLargeError(StorageError):
    """A batch larger than ``max.message.bytes``."""

    error_code = ErrorCode.message_too_large


class OffsetOutOfRangeError(StorageError):
    """An offset below the log start offset or above the log end offset / high watermark."""

    error_code = ErrorCode.offset_out_of_range


class OutOfOrderSequenceError(StorageError):
    """An idempotent producer's batch whose sequence does not follow the last one."""

    error_code = ErrorCode.out_of_order_sequence_number


class InvalidProducerEpochError(StorageError):
    """A batch from an older epoch of a producer id than the one already seen."""

    error_code = ErrorCode.invalid_producer_epoch


class UnknownProducerIdError(StorageError):
    """A batch with a non-zero sequence from a producer id the log has no state for."""

    error_code = ErrorCode.unknown_producer_id


class InvalidTimestampError(StorageError):
    """A CreateTime timestamp outside message.timestamp.before/after.max.ms."""

    error_code = ErrorCode.invalid_timestamp


class InvalidConfigError(StorageError):
    """An unknown topic config name or a value that does not parse / is out of range."""

    error_code = ErrorCode.invalid_config


class DuplicateLogDirError(StorageError):
    """A partition has a live directory in two log directories (Kafka refuses to start)."""

    error_code = ErrorCode.kafka_storage_error


class KafkaStorageError(StorageError):
    """The partition's log directory cannot do what was asked: its disk is full or failing,
    or the directory is offline (Kafka's KAFKA_STORAGE_ERROR, which clients retry)."""

    error_code = ErrorCode.kafka_storage_error


class DiskError(KafkaStorageError):
    """An operation on a log directory's files failed with ``cause`` (ENOSPC, EIO ...).
    ``undone``: the files were left exactly as before it (a partly written batch cut off
    again), so the log is intact and may be written again once the disk allows it; False:
    what the files hold past the last good state is unknown."""

    def __init__(self, message: str, cause: OSError, *, undone: bool) -> None:
        super().__init__(message)
        self.cause = cause
        self.undone = undone


class LogDirLockedError(StorageError):
    """Another process (or LogManager) holds the data directory's lock."""

    error_code = ErrorCode.kafka_storage_error


class RecordValidationError(StorageError):
    """Some records of a batch break a per-record rule (KIP-467): the batch is refused and
    ``record_errors`` names them as ``(index in the batch, message)``, so a client fails only
    those. ``error_code`` is INVALID_TIMESTAMP when any error is a timestamp one, else
    INVALID_RECORD (Kafka's ``LogValidator.processRecordErrors``)."""

    def __init__(self, error_code: ErrorCode, message: str,
                 record_errors: list[tuple[int, str]]) -> None:  # fmt: skip
        super().__init__(message)
        self.error_code = error_code
        self.record_errors = record_errors
