"""__share_group_state records (Kafka's byte layout) and the combining of state deltas."""

from __future__ import annotations

import uuid

import pytest

from strom.broker.group.records import RecordFormatError
from strom.broker.share import records as rec
from strom.broker.share.state import ACKNOWLEDGED, ARCHIVED, AVAILABLE, Batch, combine, normalize

TOPIC = uuid.UUID("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")


def test_key_layout_is_kafkas() -> None:
    key = rec.encode_key(rec.SHARE_UPDATE, "g", TOPIC, 3)
    # int16 record type, int16-length group, 16 uuid bytes, int32 partition
    assert key == b"\x00\x01" + b"\x00\x01g" + TOPIC.bytes + b"\x00\x00\x00\x03"
    record_type, decoded = rec.decode_key(key)
    assert (record_type, decoded.group_id, decoded.topic_id, decoded.partition) == (1, "g", TOPIC, 3)


# Bytes written by Kafka 4.3.1's own generated classes (MessageUtil.toVersionPrefixedByteBuffer
# of ShareSnapshotValue / ShareUpdateValue / ShareUpdateKey / ShareGroupMetadataValue with these
# values, run once against the kafka-share-coordinator and kafka-group-coordinator jars).
KAFKA_SNAPSHOT = ("000000000002000000010000000700000000000000640000000000000005000000000000000602"
                  "000000000000006400000000000000680400030001000400000005")
KAFKA_UPDATE = "00000000000000000001ffffffffffffffff0100"
KAFKA_UPDATE_KEY = "00010001670f1e2d3c4b5a69788796a5b4c3d2e1f000000003"
KAFKA_SHARE_GROUP_METADATA = "000000000003000000000000000000"


def test_the_bytes_are_kafkas() -> None:
    from strom.broker.share import group_records as grec

    snapshot = rec.ShareSnapshotValue(
        snapshot_epoch=rec.i32(2), state_epoch=rec.i32(1), leader_epoch=rec.i32(7),
        start_offset=rec.i64(100), create_timestamp=rec.i64(5), write_timestamp=rec.i64(6),
        state_batches=(rec.batch(100, 104, ARCHIVED, 3),), delivery_complete_count=rec.i32(5),
    )
    assert rec.encode_value(snapshot).hex() == KAFKA_SNAPSHOT
    update = rec.ShareUpdateValue(snapshot_epoch=rec.i32(0), leader_epoch=rec.i32(1),
                                  start_offset=rec.i64(-1), state_batches=())
    assert rec.encode_value(update).hex() == KAFKA_UPDATE
    assert rec.encode_key(rec.SHARE_UPDATE, "g", TOPIC, 3).hex() == KAFKA_UPDATE_KEY
    assert grec.encode_metadata(3).hex() == KAFKA_SHARE_GROUP_METADATA
    assert grec.decode_metadata(bytes.fromhex(KAFKA_SHARE_GROUP_METADATA)) == 3


def test_snapshot_value_layout_and_round_trip() -> None:
    value = rec.ShareSnapshotValue(
        snapshot_epoch=rec.i32(2), state_epoch=rec.i32(1), leader_epoch=rec.i32(7),
        start_offset=rec.i64(100), create_timestamp=rec.i64(5), write_timestamp=rec.i64(6),
        state_batches=(rec.batch(100, 104, ARCHIVED, 3),), delivery_complete_count=rec.i32(5),
    )
    data = rec.encode_value(value)
    expected = (
        b"\x00\x00"  # value version 0
        + (2).to_bytes(4, "big") + (1).to_bytes(4, "big") + (7).to_bytes(4, "big")
        + (100).to_bytes(8, "big") + (5).to_bytes(8, "big") + (6).to_bytes(8, "big")
        + b"\x02"  # compact array: 1 batch
        + (100).to_bytes(8, "big") + (104).to_bytes(8, "big") + b"\x04" + b"\x00\x03" + b"\x00"
        + b"\x01" + b"\x00" + b"\x04" + (5).to_bytes(4, "big")  # tagged field 0: the count
    )
    assert data == expected
    assert rec.decode_value(rec.SHARE_SNAPSHOT, data) == value


def test_update_value_leaves_an_unknown_count_out() -> None:
    value = rec.ShareUpdateValue(snapshot_epoch=rec.i32(0), leader_epoch=rec.i32(1),
                                 start_offset=rec.i64(-1), state_batches=())
    data = rec.encode_value(value)
    assert data.endswith(b"\x01\x00")  # empty batches, no tagged fields
    assert rec.decode_value(rec.SHARE_UPDATE, data).delivery_complete_count == -1


@pytest.mark.parametrize("data", [b"", b"\x00", b"\x00\x07abc", b"\x00\x00\x00\x01g"])
def test_bad_keys_are_record_format_errors(data: bytes) -> None:
    with pytest.raises(RecordFormatError):
        rec.decode_key(data)


def test_bad_values_are_record_format_errors() -> None:
    with pytest.raises(RecordFormatError):
        rec.decode_value(rec.SHARE_SNAPSHOT, b"\x00\x00\x00")
    with pytest.raises(RecordFormatError):
        rec.decode_value(rec.SHARE_SNAPSHOT, b"\x00\x05")


def test_combine_newer_wins_where_they_overlap() -> None:
    current = [Batch(10, 19, AVAILABLE, 1)]
    update = [Batch(12, 14, ACKNOWLEDGED, 1)]
    assert combine(current, update, 10) == [
        Batch(10, 11, AVAILABLE, 1), Batch(12, 14, ACKNOWLEDGED, 1), Batch(15, 19, AVAILABLE, 1)]


def test_combine_cuts_below_the_start_and_merges() -> None:
    current = [Batch(0, 9, ACKNOWLEDGED, 1), Batch(10, 12, AVAILABLE, 2)]
    update = [Batch(13, 15, AVAILABLE, 2)]
    assert combine(current, update, 5) == [Batch(5, 9, ACKNOWLEDGED, 1), Batch(10, 15, AVAILABLE, 2)]
    assert combine(current, update, 20) == []
    assert combine([], [], -1) == []


def test_normalize_sorts_and_merges() -> None:
    assert normalize([Batch(5, 6, 0, 1), Batch(0, 4, 0, 1), Batch(7, 6, 0, 1)]) == [Batch(0, 6, 0, 1)]
