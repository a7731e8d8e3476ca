"""Kafka record batch v2 (magic 2): the one import point for the header and the record codec.

The code lives in two modules with one job each:

* :mod:`strom.protocol.batch_header` — the 61-byte header (layout documented there), CRC-32C,
  in-place patches of baseOffset / partitionLeaderEpoch / LogAppendTime: the broker's hot path;
* :mod:`strom.protocol.records` — varints, :class:`Record`, :func:`decode_records`,
  :func:`build_batch` / :func:`build_batch_from_records`: internal topics, compactor, tests.

Everything is re-exported here, so ``from strom.protocol.record_batch import ...`` and
``record_batch as rb`` keep working.
"""

from __future__ import annotations

from strom.protocol.batch_header import (
    COMPRESSION_MASK,
    CONTROL_BIT,
    CREATE_TIME,
    HEADER_SIZE,
    HEADER_STRUCT,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    MAGIC,
    MIN_BATCH_LENGTH,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    BatchHeader,
    Buffer,
    CorruptRecordError,
    InvalidRecordError,
    RecordBatchError,
    compute_crc,
    crc_of,
    increment_sequence,
    iter_batches,
    parse_header,
    patch_base_offset,
    patch_partition_leader_epoch,
    set_log_append_time,
    verify_crc,
    walk_headers,
    with_offsets,
)
from strom.protocol.records import (
    DELETE_HORIZON_BIT,
    Header,
    Record,
    build_batch,
    build_batch_from_records,
    decode_records,
    decode_varint,
    encode_varint,
)

__all__ = [
    "COMPRESSION_MASK",
    "CONTROL_BIT",
    "CREATE_TIME",
    "DELETE_HORIZON_BIT",
    "HEADER_SIZE",
    "HEADER_STRUCT",
    "LOG_APPEND_TIME",
    "LOG_OVERHEAD",
    "MAGIC",
    "MIN_BATCH_LENGTH",
    "TIMESTAMP_TYPE_BIT",
    "TRANSACTIONAL_BIT",
    "BatchHeader",
    "Buffer",
    "CorruptRecordError",
    "Header",
    "InvalidRecordError",
    "Record",
    "RecordBatchError",
    "build_batch",
    "build_batch_from_records",
    "compute_crc",
    "crc_of",
    "decode_records",
    "decode_varint",
    "encode_varint",
    "increment_sequence",
    "iter_batches",
    "parse_header",
    "patch_base_offset",
    "patch_partition_leader_epoch",
    "set_log_append_time",
    "verify_crc",
    "walk_headers",
    "with_offsets",
]
