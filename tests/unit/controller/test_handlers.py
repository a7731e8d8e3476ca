"""The controller's handlers translate the wire: each one called with a real kio request
against the active controller of an in-memory cluster, and against a broker that is not the
controller (NOT_CONTROLLER)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from strom.broker.context import Client, RequestContext
from strom.broker.controller_channel import ControllerChannel
from strom.broker.handlers import (
    alter_partition,
    alter_partition_reassignments,
    controlled_shutdown,
    elect_leaders,
    list_partition_reassignments,
)
from strom.controller import Controller
from strom.protocol.errors import ErrorCode
from strom.protocol.messages import RequestHeader, build, request_class, request_module
from tests.unit.controller.harness import Cluster, run


def _ctx(controller: Controller | None, api_key: int, version: int) -> RequestContext:
    """A request on a cluster member whose controller service runs ``controller`` (None: no
    controller at all); the handlers reach it through the services' controller channel."""
    channel = ControllerChannel(SimpleNamespace(controller=controller),  # type: ignore[arg-type]
                                SimpleNamespace(led_locally=False),  # type: ignore[arg-type]
                                None)  # type: ignore[arg-type]  # not a single node
    services: Any = SimpleNamespace(controller=channel, authorizer=None)
    return RequestContext(RequestHeader(api_key, version, 1, "test"), services,
                          Client("127.0.0.1", 1, 1))  # fmt: skip


def _req(api_key: int, version: int, **values: Any) -> Any:
    return build(request_class(api_key, version), **values)


def test_handlers_on_the_controller_and_off_it() -> None:
    async def scenario(cluster: Cluster) -> None:
        await cluster.start(1, 2, 3)
        await cluster.create_topic("t", {0: [1, 2, 3], 1: [2, 3, 1]})
        await cluster.create_topic("u", {0: [1, 2]})
        c = cluster.active()
        other = next(x for x in cluster.controllers.values() if x is not c)
        topic_id = c.ctx.topics["t"].topic_id  # type: ignore[union-attr]

        # AlterPartition v3 by topic id
        m = request_module(56, 3)
        req = _req(56, 3, broker_id=1, broker_epoch=c.ctx.brokers[1].epoch,  # type: ignore[union-attr]
                   topics=(build(m.TopicData, topic_id=topic_id, partitions=(build(
                       m.PartitionData, partition_index=0, leader_epoch=0, partition_epoch=0,
                       new_isr_with_epochs=(build(m.BrokerState, broker_id=1, broker_epoch=-1),
                                            build(m.BrokerState, broker_id=2, broker_epoch=-1))),
                   )),))  # fmt: skip
        resp = await alter_partition.handle(_ctx(c, 56, 3), req)
        assert resp.error_code == ErrorCode.none
        [p] = resp.topics[0].partitions
        assert (p.error_code, p.leader_id, tuple(p.isr), p.partition_epoch) == (
            ErrorCode.none, 1, (1, 2), 1)
        off = await alter_partition.handle(_ctx(other, 56, 3), req)
        assert off.error_code == ErrorCode.not_controller and off.topics == ()

        # ElectLeaders v2 preferred: 0 is led by its preferred replica already
        m = request_module(43, 2)
        req = _req(43, 2, election_type=0, timeout=1000, topic_partitions=(
            build(m.TopicPartitions, topic="t", partitions=(0,)),))
        resp = await elect_leaders.handle(_ctx(c, 43, 2), req)
        assert resp.error_code == ErrorCode.none
        assert resp.replica_election_results[0].partition_result[0].error_code == \
            ErrorCode.election_not_needed  # fmt: skip
        off = await elect_leaders.handle(_ctx(None, 43, 2), req)
        assert off.error_code == ErrorCode.not_controller
        v0 = await elect_leaders.handle(_ctx(None, 43, 0), _req(43, 0, timeout=1000, topic_partitions=(
            build(request_module(43, 0).TopicPartitions, topic="t", partitions=(1,)),)))
        assert v0.replica_election_results[0].partition_result[0].error_code == ErrorCode.not_controller

        # AlterPartitionReassignments v1 (RF change refused) and v0; then the list
        m = request_module(45, 1)
        req = _req(45, 1, timeout=1000, allow_replication_factor_change=False, topics=(
            build(m.ReassignableTopic, name="t", partitions=(
                build(m.ReassignablePartition, partition_index=1, replicas=(3, 1)),
                build(m.ReassignablePartition, partition_index=0, replicas=None),
            )),))  # fmt: skip
        resp = await alter_partition_reassignments.handle(_ctx(c, 45, 1), req)
        codes = {p.partition_index: p.error_code for p in resp.responses[0].partitions}
        assert codes == {1: ErrorCode.invalid_replication_factor,
                         0: ErrorCode.no_reassignment_in_progress}  # fmt: skip
        m = request_module(45, 0)
        req = _req(45, 0, timeout=1000, topics=(build(m.ReassignableTopic, name="u", partitions=(
            build(m.ReassignablePartition, partition_index=0, replicas=(3, 1)),)),))
        resp = await alter_partition_reassignments.handle(_ctx(c, 45, 0), req)
        assert resp.error_code == ErrorCode.none
        assert resp.responses[0].partitions[0].error_code == ErrorCode.none
        listed = await list_partition_reassignments.handle(_ctx(c, 46, 0), _req(46, 0, timeout=1000, topics=None))
        [t] = listed.topics
        [p] = t.partitions
        assert (t.name, p.partition_index, tuple(p.replicas), tuple(p.adding_replicas),
                tuple(p.removing_replicas)) == ("u", 0, (3, 1, 2), (3,), (2,))  # fmt: skip
        off = await list_partition_reassignments.handle(_ctx(other, 46, 0), _req(46, 0, timeout=1000, topics=None))
        assert off.error_code == ErrorCode.not_controller

        # ControlledShutdown v3
        req = _req(7, 3, broker_id=3, broker_epoch=c.ctx.brokers[3].epoch)  # type: ignore[union-attr]
        resp = await controlled_shutdown.handle(_ctx(c, 7, 3), req)
        assert resp.error_code == ErrorCode.none and resp.remaining_partitions == ()
        off = await controlled_shutdown.handle(_ctx(other, 7, 3), req)
        assert off.error_code == ErrorCode.not_controller
        await cluster.settle()
        for tp in (("t", 0), ("t", 1)):
            state, _ = await cluster.state(*tp)
            assert state.leader != 3 and 3 not in state.isr

    run(scenario)
