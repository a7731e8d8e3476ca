"""The vendored ZooKeeper-era inter-broker APIs encode, pass the pre-decode check and decode."""

from __future__ import annotations

import uuid

from strom.protocol import interbroker
from strom.protocol.messages import (
    RequestHeader,
    build,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    request_class,
    request_module,
    response_class,
)


def _leader_and_isr() -> object:
    mod = request_module(interbroker.LEADER_AND_ISR, 7)
    state = build(mod.LeaderAndIsrPartitionState, partition_index=3, controller_epoch=5,
                  leader=2, leader_epoch=9, isr=(2, 3), partition_epoch=4, replicas=(1, 2, 3),
                  adding_replicas=(), removing_replicas=(), is_new=True,
                  leader_recovery_state=0)  # fmt: skip
    topic = build(mod.LeaderAndIsrTopicState, topic_name="orders", topic_id=uuid.uuid4(),
                  partition_states=(state,))  # fmt: skip
    leader = build(mod.LeaderAndIsrLiveLeader, broker_id=2, host_name="127.0.0.3", port=9093)
    return build(request_class(interbroker.LEADER_AND_ISR, 7), controller_id=1,
                 is_k_raft_controller=False, controller_epoch=5, broker_epoch=77, type_=0,
                 topic_states=(topic,), live_leaders=(leader,))  # fmt: skip


def test_leader_and_isr_round_trips_through_the_broker_decoder() -> None:
    request = _leader_and_isr()
    frame = encode_request(RequestHeader(4, 7, 42, "controller-1"), request)
    header, decoded = decode_request(frame[4:])
    assert header == RequestHeader(4, 7, 42, "controller-1")
    assert decoded == request
    state = decoded.topic_states[0].partition_states[0]
    assert (state.leader, state.leader_epoch, state.isr, state.partition_epoch) == (2, 9, (2, 3), 4)


def test_every_vendored_api_has_request_and_response_classes() -> None:
    for (key, version) in interbroker.MODULES:
        assert request_class(key, version).__api_key__ == key
        assert response_class(key, version).__version__ == version
    assert interbroker.VERSIONS == {4: 7, 5: 4, 6: 8, 7: 3}


def test_controlled_shutdown_response_round_trips() -> None:
    cls = response_class(interbroker.CONTROLLED_SHUTDOWN, 3)
    mod = interbroker.lookup(interbroker.CONTROLLED_SHUTDOWN, 3, True)
    assert mod is not None
    remaining = build(mod.RemainingPartition, topic_name="t", partition_index=1)
    response = build(cls, error_code=0, remaining_partitions=(remaining,))
    frame = encode_response(7, 3, 9, response)
    correlation, decoded = decode_response(7, 3, frame[4:])
    assert correlation == 9 and decoded == response
