"""Transaction markers: the control batches that end a transaction in a partition.

A marker is a batch with the control and transactional attribute bits, the producer's id and
epoch, sequence -1 and exactly one record (Kafka's ``EndTransactionMarker``):

* key: version int16 (0) | type int16 (0 = ABORT, 1 = COMMIT);
* value: version int16 (0) | coordinatorEpoch int32.

Clients never see these records as messages; they use them to end a transaction while
reading (read_committed drops aborted data up to the ABORT marker).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from strom.protocol.batch_header import Buffer, CorruptRecordError
from strom.protocol.records import build_batch, decode_records

ABORT = 0
COMMIT = 1
_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


@dataclass(frozen=True, slots=True)
class Marker:
    commit: bool
    coordinator_epoch: int


def build_marker(producer_id: int, producer_epoch: int, *, commit: bool,
                 coordinator_epoch: int, timestamp_ms: int) -> bytes:  # fmt: skip
    """One control batch (base offset 0: the log assigns the real one)."""
    key = _KEY.pack(0, COMMIT if commit else ABORT)
    value = _VALUE.pack(0, coordinator_epoch)
    return build_batch([(key, value, (), timestamp_ms)], producer_id=producer_id,
                       producer_epoch=producer_epoch, is_transactional=True,
                       is_control=True)  # fmt: skip


def parse_marker(batch: Buffer) -> Marker | None:
    """The marker in a control batch, or None when its record is not a transaction marker
    (Kafka has other control record types, which end no transaction)."""
    records = decode_records(batch)
    if not records or records[0].key is None or len(records[0].key) < _KEY.size:
        raise CorruptRecordError("control batch without a control record key")
    _version, kind = _KEY.unpack_from(records[0].key)
    if kind not in (ABORT, COMMIT):
        return None
    coordinator_epoch = -1
    value = records[0].value
    if value is not None and len(value) >= _VALUE.size:
        coordinator_epoch = _VALUE.unpack_from(value)[1]
    return Marker(kind == COMMIT, coordinator_epoch)
