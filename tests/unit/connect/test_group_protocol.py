"""Kafka Connect's group sub-protocol encodings (ConnectProtocol / IncrementalCooperative)."""

from __future__ import annotations

import struct

import pytest

from strom.connect.group_protocol import (
    Assignment,
    ConnectorsAndTasks,
    ProtocolError,
    WorkerState,
    decode_assignment,
    decode_metadata,
    encode_assignment,
    encode_metadata,
    join_protocols,
)


def test_metadata_v0_is_kafkas_layout() -> None:
    raw = encode_metadata(WorkerState("http://a:1/", 5), 0)
    assert raw == b"\x00\x00" + b"\x00\x0bhttp://a:1/" + struct.pack(">q", 5)
    assert decode_metadata(raw) == WorkerState("http://a:1/", 5, None)


def test_metadata_v1_without_assignment_has_a_null_allocation() -> None:
    raw = encode_metadata(WorkerState("u", -1), 1)
    assert raw == b"\x00\x01\x00\x01u" + struct.pack(">q", -1) + b"\xff\xff\xff\xff"
    assert decode_metadata(raw).assignment is None


def test_assignment_v0_layout_groups_tasks_by_connector() -> None:
    a = Assignment(0, 0, "m1", "http://l/", 7, ConnectorsAndTasks(["c"], [("c", 0), ("d", 2)]))
    raw = encode_assignment(a)
    expected = (b"\x00\x00" + b"\x00\x00" + b"\x00\x02m1" + b"\x00\x09http://l/" +
                struct.pack(">q", 7) + struct.pack(">i", 2) +
                b"\x00\x01c" + struct.pack(">iii", 2, -1, 0) +
                b"\x00\x01d" + struct.pack(">ii", 1, 2))
    assert raw == expected
    back = decode_assignment(raw)
    assert back.assigned == a.assigned and back.leader_url == "http://l/"
    assert back.revoked.is_empty() and back.delay_ms == 0


def test_assignment_v1_round_trip_with_revocations_and_delay() -> None:
    a = Assignment(2, 0, "m", "http://l/", 3, ConnectorsAndTasks(["x"], [("y", 1)]),
                   ConnectorsAndTasks([], [("x", 0)]), 1500)
    assert decode_assignment(encode_assignment(a)) == a
    state = WorkerState("http://w/", 3, a)
    back = decode_metadata(encode_metadata(state, 2))
    assert back.assignment is not None and back.assignment.assigned == a.assigned
    assert back.assignment.revoked.is_empty()  # metadata carries what the member runs


def test_v1_assignment_missing_trailing_fields_takes_defaults() -> None:
    full = encode_assignment(Assignment(1, 0, "m", "u", 1, ConnectorsAndTasks(["c"], [])))
    short = full[:-(4 + 4)]  # no revoked array, no delay
    back = decode_assignment(short)
    assert back.assigned.connectors == ["c"] and back.delay_ms == 0


def test_truncated_data_is_a_protocol_error() -> None:
    raw = encode_assignment(Assignment(1, 0, "m", "u", 1, ConnectorsAndTasks(["c"], [])))
    with pytest.raises(ProtocolError):
        decode_assignment(raw[:9])


def test_protocols_offered_in_kafkas_preference_order() -> None:
    state = WorkerState("u", 0)
    assert [n for n, _ in join_protocols("sessioned", state)] == [
        "sessioned", "compatible", "default"]
    assert [n for n, _ in join_protocols("compatible", state)] == ["compatible", "default"]
    assert [n for n, _ in join_protocols("eager", state)] == ["default"]
    assert join_protocols("sessioned", state)[0][1][:2] == b"\x00\x02"
