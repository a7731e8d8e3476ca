"""Share groups on the wire, with strom's codec: what librdkafka never sends or cannot show.

Share session epochs and their errors, record-limit acquisition and RENEW (ShareFetch /
ShareAcknowledge v2), acknowledging records one does not hold, lock expiry and the delivery
count, closing a session, FindCoordinator for a share-partition key and the share-group state
APIs (83–87) with their leader-epoch fencing.
"""

from __future__ import annotations

import datetime
import time
import uuid
from typing import Any

import pytest

from strom.protocol.errors import ErrorCode
from strom.protocol.messages import build, request_module
from strom.testing.raw import RawConnection
from tests.integration.clients import create_topic, produce
from tests.integration.share_helpers import BROKER_SETTINGS, set_group_configs
from tests.topology import module_broker

E = ErrorCode
FETCH, ACK = 78, 79
LOCK_MS = 3000


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    with module_broker("single", tmp_path_factory.mktemp("sharewire"), BROKER_SETTINGS) as b:
        yield b


def _topic_id(conn: RawConnection, topic: str) -> uuid.UUID:
    meta = conn.request(3, 12, topics=None, allow_auto_topic_creation=False,
                        include_topic_authorized_operations=False)  # fmt: skip
    return next(t.topic_id for t in meta.topics if t.name == topic)


def _fetch(conn: RawConnection, group: str, member: str, epoch: int, tid: uuid.UUID,
           acks: list[tuple[int, int, list[int]]] = (), *, version: int = 2,
           max_records: int = 100, mode: int = 0, renew: bool = False, wait_ms: int = 200) -> Any:  # type: ignore[assignment]
    m = request_module(FETCH, version)
    batches = tuple(build(m.AcknowledgementBatch, first_offset=a, last_offset=b,
                          acknowledge_types=tuple(t)) for a, b, t in acks)  # fmt: skip
    return conn.request(FETCH, version, group_id=group, member_id=member,
                        share_session_epoch=epoch, max_wait=datetime.timedelta(milliseconds=wait_ms),
                        min_bytes=1, max_bytes=1 << 20, max_records=max_records, batch_size=100,
                        share_acquire_mode=mode, is_renew_ack=renew,
                        topics=(build(m.FetchTopic, topic_id=tid, partitions=(
                            build(m.FetchPartition, partition_index=0,
                                  acknowledgement_batches=batches),)),),
                        forgotten_topics_data=())  # fmt: skip


def _ack(conn: RawConnection, group: str, member: str, epoch: int, tid: uuid.UUID,
         acks: list[tuple[int, int, list[int]]], *, renew: bool = False) -> Any:
    m = request_module(ACK, 2)
    return conn.request(ACK, 2, group_id=group, member_id=member, share_session_epoch=epoch,
                        is_renew_ack=renew, topics=(build(m.AcknowledgeTopic, topic_id=tid, partitions=(
                            build(m.AcknowledgePartition, partition_index=0, acknowledgement_batches=tuple(
                                build(m.AcknowledgementBatch, first_offset=a, last_offset=b,
                                      acknowledge_types=tuple(t)) for a, b, t in acks)),)),))  # fmt: skip


def _acquired(resp: Any) -> list[tuple[int, int, int]]:
    assert resp.error_code == E.none, resp
    return [(int(a.first_offset), int(a.last_offset), int(a.delivery_count))
            for t in resp.responses for p in t.partitions for a in p.acquired_records]  # fmt: skip


def _partition(resp: Any) -> Any:
    ((part,),) = [t.partitions for t in resp.responses]
    return part


@pytest.fixture
def queue(broker, topic_name):  # type: ignore[no-untyped-def]
    """A topic of 10 one-record batches, a group reading it from the earliest offset with 3 s
    locks, and a connection to the broker: (conn, group, topic id)."""
    create_topic(broker.bootstrap, topic_name, 1)
    group = f"g-{topic_name}"
    set_group_configs(broker.bootstrap, group, share_auto_offset_reset="earliest",
                      share_record_lock_duration_ms=str(LOCK_MS))  # fmt: skip
    produce(broker.bootstrap, topic_name, ({"value": f"v{i}".encode()} for i in range(10)),
            **{"batch.num.messages": 1, "linger.ms": 0})  # fmt: skip
    with RawConnection(broker.bootstrap) as conn:
        yield conn, group, _topic_id(conn, topic_name)


def test_share_session_epochs(queue) -> None:  # type: ignore[no-untyped-def]
    conn, group, tid = queue
    assert _fetch(conn, group, "m", 1, tid).error_code == E.share_session_not_found
    assert _fetch(conn, group, "m", 0, tid, [(0, 0, [1])]).error_code == E.invalid_request
    opened = _fetch(conn, group, "m", 0, tid, max_records=1, mode=1)
    assert _acquired(opened) == [(0, 0, 1)]
    assert opened.acquisition_lock_timeout == datetime.timedelta(milliseconds=LOCK_MS)
    assert _acquired(_fetch(conn, group, "m", 1, tid, max_records=1, mode=1)) == [(1, 1, 1)]
    assert _fetch(conn, group, "m", 5, tid).error_code == E.invalid_share_session_epoch
    # the wrong epoch closed the session and released what it held
    assert _fetch(conn, group, "m", 2, tid).error_code == E.share_session_not_found
    assert _acquired(_fetch(conn, group, "n", 0, tid, max_records=2, mode=1)) == [(0, 1, 2)]
    assert _ack(conn, group, "n", 0, tid, [(0, 1, [1])]).error_code == E.invalid_share_session_epoch


@pytest.mark.serial  # lock durations against the clock
def test_record_limit_renew_and_acknowledging_what_one_does_not_hold(queue) -> None:  # type: ignore[no-untyped-def]
    conn, group, tid = queue
    t0 = time.monotonic()
    assert _acquired(_fetch(conn, group, "a", 0, tid, max_records=3, mode=1)) == [(0, 2, 1)]
    assert _acquired(_fetch(conn, group, "b", 0, tid, max_records=3, mode=1)) == [(3, 5, 1)]
    assert _acquired(_fetch(conn, group, "x", 0, tid, max_records=10)) == [(6, 9, 1)]  # the rest
    stolen = _ack(conn, group, "b", 1, tid, [(0, 0, [1])])
    assert _partition(stolen).error_code == E.invalid_record_state
    time.sleep(max(0.0, t0 + 0.6 * LOCK_MS / 1000 - time.monotonic()))
    renewed = _ack(conn, group, "a", 1, tid, [(0, 2, [4])], renew=True)  # RENEW: lock restarts
    assert _partition(renewed).error_code == E.none
    assert _partition(_ack(conn, group, "a", 2, tid, [(0, 0, [4])])).error_code == E.invalid_request
    # b's (and x's) lock runs out about LOCK_MS after t0, a's (renewed) about 0.6 LOCK_MS
    # later: the first records c gets are b's, delivered a second time
    again: list[tuple[int, int, int]] = []
    epoch = 0
    while not again and time.monotonic() < t0 + 10:
        again = _acquired(_fetch(conn, group, "c", epoch, tid, max_records=3, mode=1, wait_ms=200))
        epoch += 1
    assert again == [(3, 5, 2)]
    accepted = _ack(conn, group, "a", 3, tid, [(0, 2, [1, 2, 3])])  # accept, release, reject
    assert _partition(accepted).error_code == E.none
    late = _ack(conn, group, "b", 2, tid, [(3, 3, [1])])  # b's lock expired: c holds it now
    assert _partition(late).error_code == E.invalid_record_state
    closed = _ack(conn, group, "c", -1, tid, [(3, 3, [1])])  # accept one, close: the rest released
    assert _partition(closed).error_code == E.none
    rest = _acquired(_fetch(conn, group, "d", 0, tid, max_records=100))
    # 1 released by a, 4-5 c's released when it closed, 6-9 x's after its lock ran out; never
    # 0 and 3 (accepted) nor 2 (rejected)
    assert {o for a, b, _n in rest for o in range(a, b + 1)} == {1, 4, 5, 6, 7, 8, 9}
    assert [(a, b, n) for a, b, n in rest if a <= 5] == [(1, 1, 2), (4, 5, 3)]  # b, c, d


def test_find_coordinator_and_the_state_apis(queue) -> None:  # type: ignore[no-untyped-def]
    from strom.broker.share.coordinator import coordinator_key

    conn, group, tid = queue
    _acquired(_fetch(conn, group, "a", 0, tid, max_records=4, mode=1))
    assert _partition(_ack(conn, group, "a", 1, tid, [(0, 3, [1, 1, 3, 2])])).error_code == E.none
    key = coordinator_key((group, tid, 0))
    found = conn.request(10, 6, key_type=2, coordinator_keys=(key,))
    (coord,) = found.coordinators
    assert coord.error_code == E.none and coord.node_id >= 0
    assert conn.request(10, 6, key_type=2, coordinator_keys=("no-colons",)).coordinators[0].error_code == E.invalid_request
    m = request_module(84, 0)
    read = conn.request(84, 0, group_id=group, topics=(build(m.ReadStateData, topic_id=tid, partitions=(
        build(m.PartitionData, partition=0, leader_epoch=-1),)),))  # fmt: skip
    (((state,),),) = [[r.partitions for r in read.results]]
    # 0, 1 accepted and 2 rejected (archived): the start moved past them; 3 released
    assert state.error_code == E.none and state.start_offset == 3
    assert [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
            for b in state.state_batches] == [(3, 3, 0, 1)]
    m = request_module(85, 1)
    stale = conn.request(85, 1, group_id=group, topics=(build(m.WriteStateData, topic_id=tid, partitions=(
        build(m.PartitionData, partition=0, state_epoch=0, leader_epoch=-5, start_offset=9,
              delivery_complete_count=0, state_batches=()),)),))  # fmt: skip
    assert stale.results[0].partitions[0].error_code == E.none  # -1/-5: not fenced by epochs
    m = request_module(87, 1)
    summary = conn.request(87, 1, group_id=group, topics=(build(m.ReadStateSummaryData, topic_id=tid,
        partitions=(build(m.PartitionData, partition=0, leader_epoch=-1),)),))  # fmt: skip
    assert summary.results[0].partitions[0].start_offset == 9
    m = request_module(86, 0)
    gone = conn.request(86, 0, group_id=group, topics=(build(m.DeleteStateData, topic_id=tid,
        partitions=(build(m.PartitionData, partition=0),)),))  # fmt: skip
    assert gone.results[0].partitions[0].error_code == E.none
    m = request_module(84, 0)
    after = conn.request(84, 0, group_id=group, topics=(build(m.ReadStateData, topic_id=tid, partitions=(
        build(m.PartitionData, partition=0, leader_epoch=-1),)),))  # fmt: skip
    assert after.results[0].partitions[0].start_offset == -1  # uninitialized again
    bad = conn.request(83, 0, group_id="", topics=())
    assert bad.results == ()


def test_heartbeat_epochs_and_assignment(queue) -> None:  # type: ignore[no-untyped-def]
    conn, group, tid = queue
    deadline = time.monotonic() + 30
    while True:  # the first FindCoordinator creates __consumer_offsets
        found = conn.request(10, 4, key_type=0, coordinator_keys=(group,)).coordinators[0]
        join = conn.request(76, 1, group_id=group, member_id="m1", member_epoch=0, rack_id=None,
                            subscribed_topic_names=(_name(conn, tid),))  # fmt: skip
        if join.error_code == E.none or time.monotonic() > deadline:
            break
        assert found.error_code in (E.none, E.coordinator_not_available), found
        time.sleep(0.2)
    assert join.error_code == E.none and join.member_epoch >= 1
    assert [(t.topic_id, tuple(t.partitions)) for t in join.assignment.topic_partitions] == [(tid, (0,))]
    fenced = conn.request(76, 1, group_id=group, member_id="m1", member_epoch=join.member_epoch + 7,
                          rack_id=None, subscribed_topic_names=None)  # fmt: skip
    assert fenced.error_code == E.fenced_member_epoch
    again = conn.request(76, 1, group_id=group, member_id="m1", member_epoch=join.member_epoch,
                         rack_id=None, subscribed_topic_names=None)  # fmt: skip
    assert again.error_code == E.none and again.assignment is None  # unchanged: not sent
    left = conn.request(76, 1, group_id=group, member_id="m1", member_epoch=-1, rack_id=None,
                        subscribed_topic_names=None)  # fmt: skip
    assert (left.error_code, left.member_epoch) == (E.none, -1)
    desc = conn.request(77, 1, group_ids=(group, "nope"), include_authorized_operations=False)
    mine, nope = desc.groups
    assert (mine.error_code, mine.group_state, mine.members) == (E.none, "Empty", ())
    assert nope.error_code == E.group_id_not_found


def _name(conn: RawConnection, tid: uuid.UUID) -> str:
    meta = conn.request(3, 12, topics=None, allow_auto_topic_creation=False,
                        include_topic_authorized_operations=False)  # fmt: skip
    return next(t.name for t in meta.topics if t.topic_id == tid)


def test_auto_offset_reset_latest_and_by_duration(broker, topic_name) -> None:  # type: ignore[no-untyped-def]
    """latest (the default): the first share fetch starts at the high watermark; by_duration:
    at the first record not older than the duration; a bad value is INVALID_CONFIG."""
    from confluent_kafka import KafkaException

    create_topic(broker.bootstrap, topic_name, 1)
    now_ms = int(time.time() * 1000)
    produce(broker.bootstrap, topic_name,
            [{"value": f"old{i}".encode(), "timestamp": now_ms - 7_200_000} for i in range(4)]
            + [{"value": f"new{i}".encode(), "timestamp": now_ms} for i in range(3)],
            **{"batch.num.messages": 1, "linger.ms": 0})  # fmt: skip
    with pytest.raises(KafkaException, match="INVALID_CONFIG|share.auto.offset.reset"):
        set_group_configs(broker.bootstrap, "bad", share_auto_offset_reset="sometimes")
    set_group_configs(broker.bootstrap, f"d-{topic_name}", share_auto_offset_reset="by_duration:PT1H")
    with RawConnection(broker.bootstrap) as conn:
        tid = _topic_id(conn, topic_name)
        assert _acquired(_fetch(conn, f"d-{topic_name}", "m", 0, tid)) == [(4, 6, 1)]
        assert _acquired(_fetch(conn, f"l-{topic_name}", "m", 0, tid)) == []  # latest: nothing
    produce(broker.bootstrap, topic_name, [{"value": b"after"}])
    with RawConnection(broker.bootstrap) as conn:
        assert _acquired(_fetch(conn, f"l-{topic_name}", "m", 0, tid, wait_ms=2000)) == [(7, 7, 1)]
