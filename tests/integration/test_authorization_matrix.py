"""The authorization matrix: every API key the broker serves, asked by a principal no ACL
allows, gets Kafka's error and changes nothing.

The broker runs Kafka's StandardAuthorizer semantics with ``allow.everyone.if.no.acl.found``
false. Until SASL gives connections names, the two sides differ by host, as ACLs allow:
``User:ANONYMOUS`` from 127.0.0.1 is allowed ALL on every topic, group, transactional id and
the cluster (ACLs made by a super user, then the broker restarted without super users: the
ACLs survive the restart), and the same principal from 127.0.0.3 matches no ACL.

The list of API keys comes from the dispatch table: an API added without an entry here fails
:func:`test_every_api_key_has_a_row`. After every refused request the data are read back from
the allowed side and compared: the log's offsets, the committed offsets, the topic's
partitions and configs, the ACLs, the transactional state, the group.
"""

from __future__ import annotations

import datetime
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields, is_dataclass
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from strom.admin.wire import WireConnection
from strom.broker import dispatch
from strom.protocol.errors import ErrorCode
from strom.protocol.messages import request_class, request_module
from strom.protocol.records import build_batch
from strom.testing.process import BrokerProcess
from strom.testing.samples import minimal

TOPIC, GROUP, TXN, NEW_TOPIC = "m-topic", "m-group", "m-txn", "m-new"
ALLOWED_HOST, DENIED_HOST = "127.0.0.1", "127.0.0.3"
STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
E = ErrorCode
TAF, GAF, CAF, XAF = (E.topic_authorization_failed, E.group_authorization_failed,
                      E.cluster_authorization_failed, E.transactional_id_authorization_failed)  # fmt: skip
MS = datetime.timedelta(milliseconds=1)


class SourceBoundConnection(WireConnection):
    """strom's admin wire connection, leaving from a chosen loopback address (the ACLs' host)."""

    def __init__(self, bootstrap: str, source: str) -> None:
        host, _, port = bootstrap.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=15,
                                             source_address=(source, 0))  # fmt: skip
        self.client_id = "matrix"
        self._correlation = 0


@dataclass
class World:
    broker: BrokerProcess
    topic_id: uuid.UUID
    conf: dict[str, str]


def _allow_all_from(host: str) -> list[AclBinding]:
    user, allow, lit = "User:ANONYMOUS", AclPermissionType.ALLOW, ResourcePatternType.LITERAL
    return [AclBinding(rt, name, lit, user, host, AclOperation.ALL, allow)
            for rt, name in ((ResourceType.TOPIC, "*"), (ResourceType.GROUP, "*"),
                             (ResourceType.TRANSACTIONAL_ID, "*"),
                             (ResourceType.BROKER, "kafka-cluster"))]  # fmt: skip


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    data = tmp_path_factory.mktemp("authz") / "data"
    settings = {"authorizer.class.name": STANDARD, "super.users": "User:ANONYMOUS",
                "offsets.topic.num.partitions": "1", "transaction.state.log.num.partitions": "1",
                "group.initial.rebalance.delay.ms": "0"}  # fmt: skip
    broker = BrokerProcess(data, settings=settings)
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for f in admin.create_acls(_allow_all_from(ALLOWED_HOST)).values():
            f.result(15)
        broker.kill()  # kill -9: the ACLs must survive it
        del settings["super.users"]
        broker = BrokerProcess(data, port=broker.port, settings=settings)
        broker.start()
        yield _populate(broker)
    finally:
        broker.stop()


def _populate(broker: BrokerProcess) -> World:
    """From the allowed host: a topic with 3 records and a config, a group's committed offset,
    a committed transaction."""
    conf = {"bootstrap.servers": broker.bootstrap}
    admin = AdminClient(conf)
    admin.create_topics([NewTopic(TOPIC, 1, 1, config={"retention.ms": "86400000"})])[TOPIC].result(20)
    producer = Producer(conf)
    for i in range(3):
        producer.produce(TOPIC, value=f"v{i}".encode(), partition=0)
    assert producer.flush(20) == 0
    txn = Producer({**conf, "transactional.id": TXN})
    txn.init_transactions(20)
    txn.begin_transaction()
    txn.produce(TOPIC, value=b"in-txn", partition=0)
    txn.commit_transaction(20)
    consumer = Consumer({**conf, "group.id": GROUP, "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(TOPIC, 0, 2)], asynchronous=False)
    consumer.close()
    with WireConnection(broker.bootstrap) as conn:
        meta = conn.request(3, 12, topics=(minimal(request_module(3, 12).MetadataRequestTopic,
                                                   name=TOPIC),),
                            allow_auto_topic_creation=False,
                            include_topic_authorized_operations=True)  # fmt: skip
    (topic,) = meta.topics
    assert topic.error_code == E.none
    # KIP-430: the allowed side may do every topic operation
    assert topic.topic_authorized_operations == sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))
    return World(broker, topic.topic_id, conf)


def _snapshot(w: World) -> dict[str, Any]:
    """What a refused request must not change, read from the allowed side."""
    conf = w.conf
    admin = AdminClient(conf)
    consumer = Consumer({**conf, "group.id": GROUP, "enable.auto.commit": False})
    low, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=15)
    committed = consumer.committed([TopicPartition(TOPIC, 0)], timeout=15)[0].offset
    consumer.close()
    topics = admin.list_topics(timeout=15).topics
    resource = ConfigResource(ConfigResource.Type.TOPIC, TOPIC)
    configs = admin.describe_configs([resource])[resource].result(15)
    acls = admin.describe_acls(AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
        AclPermissionType.ANY)).result(15)  # fmt: skip
    groups = admin.list_consumer_groups().result(15)
    with WireConnection(w.broker.bootstrap) as conn:
        txns = conn.request(66, 1, state_filters=(), producer_id_filters=(), duration_filter=-1)
    return {
        "offsets": (low, high), "committed": committed,
        "partitions": len(topics[TOPIC].partitions), "new_topic": NEW_TOPIC in topics,
        "retention": configs["retention.ms"].value, "acls": sorted(map(str, acls)),
        "groups": sorted(g.group_id for g in groups.valid),
        "txns": sorted((t.transactional_id, t.transaction_state) for t in txns.transaction_states),
    }


def _codes(entity: Any) -> set[int]:
    """Every error code anywhere in a response."""
    out: set[int] = set()
    if is_dataclass(entity):
        for f in fields(entity):
            value = getattr(entity, f.name)
            if f.name.endswith("error_code") and isinstance(value, int):
                out.add(int(value))
            else:
                out |= _codes(value)
    elif isinstance(entity, tuple | list):
        for item in entity:
            out |= _codes(item)
    return out


def m(api_key: int, version: int) -> Any:
    return request_module(api_key, version)


def req(api_key: int, version: int, **values: Any) -> tuple[int, int, Any]:
    return api_key, version, minimal(request_class(api_key, version), **values)


def n(cls: Any, **values: Any) -> Any:
    return minimal(cls, **values)


def _rows(w: World) -> dict[int, tuple[tuple[int, int, Any], Callable[[Any], None]]]:
    """API key -> (request, check of the refused answer)."""
    tid = w.topic_id
    batch = build_batch([(None, b"denied", [], int(time.time() * 1000))])

    def has(code: ErrorCode) -> Callable[[Any], None]:
        def check(resp: Any) -> None:
            assert code in _codes(resp), (code, _codes(resp), resp)
        return check

    def share_state(api_key: int, version: int, topic_class: str) -> tuple[int, int, Any]:
        mod = m(api_key, version)
        return req(api_key, version, group_id=GROUP, topics=(n(
            getattr(mod, topic_class), topic_id=tid,
            partitions=(n(mod.PartitionData, partition=0),)),))  # fmt: skip

    def metadata_named(resp: Any) -> None:
        (t,) = resp.topics
        assert t.error_code == TAF and t.partitions == ()

    rows: dict[int, tuple[tuple[int, int, Any], Callable[[Any], None]]] = {
        0: (req(0, 9, acks=1, timeout=5000 * MS, transactional_id=None, topic_data=(
            n(m(0, 9).TopicProduceData, name=TOPIC, partition_data=(
                n(m(0, 9).PartitionProduceData, index=0, records=batch),)),)), has(TAF)),
        1: (req(1, 12, replica_id=-1, max_wait=10 * MS, max_bytes=1 << 20, session_epoch=-1,
                topics=(n(m(1, 12).FetchTopic, topic=TOPIC, partitions=(
                    n(m(1, 12).FetchPartition, partition=0, partition_max_bytes=1 << 20,
                      current_leader_epoch=-1, last_fetched_epoch=-1, log_start_offset=-1),)),)),
            has(TAF)),
        2: (req(2, 7, replica_id=-1, topics=(n(m(2, 7).ListOffsetsTopic, name=TOPIC, partitions=(
            n(m(2, 7).ListOffsetsPartition, partition_index=0, timestamp=-1,
              current_leader_epoch=-1),)),)), has(TAF)),
        3: (req(3, 12, topics=(n(m(3, 12).MetadataRequestTopic, name=TOPIC),),
                allow_auto_topic_creation=True), metadata_named),
        4: (req(4, 7, controller_id=1, broker_epoch=-1), has(CAF)),
        5: (req(5, 4, controller_id=1, broker_epoch=-1), has(CAF)),
        6: (req(6, 8, controller_id=1, broker_epoch=-1), has(CAF)),
        7: (req(7, 3, broker_id=1, broker_epoch=-1), has(CAF)),
        8: (req(8, 8, group_id=GROUP, generation_id_or_member_epoch=-1, topics=(
            n(m(8, 8).OffsetCommitRequestTopic, name=TOPIC, partitions=(
                n(m(8, 8).OffsetCommitRequestPartition, partition_index=0, committed_offset=0,
                  committed_leader_epoch=-1),)),)), has(GAF)),
        9: (req(9, 8, groups=(n(m(9, 8).OffsetFetchRequestGroup, group_id=GROUP, topics=None),)),
            has(GAF)),
        10: (req(10, 4, key_type=0, coordinator_keys=(GROUP,)), has(GAF)),
        11: (req(11, 5, group_id=GROUP, session_timeout=10000 * MS, rebalance_timeout=10000 * MS,
                 protocol_type="consumer",
                 protocols=(n(m(11, 5).JoinGroupRequestProtocol, name="range"),)), has(GAF)),
        12: (req(12, 4, group_id=GROUP, generation_id=1, member_id="m"), has(GAF)),
        13: (req(13, 3, group_id=GROUP, members=(n(m(13, 3).MemberIdentity, member_id="m"),)),
             has(GAF)),
        14: (req(14, 5, group_id=GROUP, generation_id=1, member_id="m"), has(GAF)),
        15: (req(15, 5, groups=(GROUP,), include_authorized_operations=True), has(GAF)),
        16: (req(16, 4), lambda r: (r.error_code == E.none and r.groups == ()) or pytest.fail(str(r))),
        18: (req(18, 3, client_software_name="matrix", client_software_version="1"),
             lambda r: r.error_code == E.none or pytest.fail(str(r))),
        19: (req(19, 5, timeout=5000 * MS, topics=(n(m(19, 5).CreatableTopic, name=NEW_TOPIC,
                                                      num_partitions=1, replication_factor=1),)),
             has(TAF)),
        20: (req(20, 6, timeout=5000 * MS,
                 topics=(n(m(20, 6).DeleteTopicState, name=TOPIC, topic_id=uuid.UUID(int=0)),)),
             has(TAF)),
        21: (req(21, 2, timeout=5000 * MS, topics=(n(m(21, 2).DeleteRecordsTopic, name=TOPIC,
             partitions=(n(m(21, 2).DeleteRecordsPartition, partition_index=0, offset=-1),)),)),
             has(TAF)),
        22: (req(22, 4, transactional_id=TXN, transaction_timeout=60000 * MS, producer_id=-1,
                 producer_epoch=-1), has(XAF)),
        23: (req(23, 3, replica_id=-1, topics=(n(m(23, 3).OffsetForLeaderTopic, topic=TOPIC,
             partitions=(n(m(23, 3).OffsetForLeaderPartition, partition=0, leader_epoch=0,
                           current_leader_epoch=-1),)),)), has(TAF)),
        24: (req(24, 3, v3_and_below_transactional_id=TXN, v3_and_below_producer_id=1,
                 v3_and_below_topics=(n(m(24, 3).AddPartitionsToTxnTopic, name=TOPIC,
                                        partitions=(0,)),)), has(XAF)),
        25: (req(25, 3, transactional_id=TXN, producer_id=1, group_id=GROUP), has(XAF)),
        26: (req(26, 3, transactional_id=TXN, producer_id=1, committed=False), has(XAF)),
        27: (req(27, 1, markers=(n(m(27, 1).WritableTxnMarker, producer_id=1, topics=(
            n(m(27, 1).WritableTxnMarkerTopic, name=TOPIC, partition_indexes=(0,)),)),)),
             has(CAF)),
        28: (req(28, 3, transactional_id=TXN, group_id=GROUP, producer_id=1, generation_id=-1,
                 topics=(n(m(28, 3).TxnOffsetCommitRequestTopic, name=TOPIC, partitions=(
                     n(m(28, 3).TxnOffsetCommitRequestPartition, partition_index=0,
                       committed_offset=0, committed_leader_epoch=-1),)),)), has(XAF)),
        29: (req(29, 3, resource_type_filter=1, pattern_type_filter=1, operation=1,
                 permission_type=1, resource_name_filter=None, principal_filter=None,
                 host_filter=None), has(CAF)),
        30: (req(30, 3, creations=(n(m(30, 3).AclCreation, resource_type=2, resource_name="*",
                                     resource_pattern_type=3, principal="User:ANONYMOUS",
                                     host=DENIED_HOST, operation=2, permission_type=3),)),
             has(CAF)),
        31: (req(31, 3, filters=(n(m(31, 3).DeleteAclsFilter, resource_type_filter=1,
                                   pattern_type_filter=1, operation=1, permission_type=1,
                                   resource_name_filter=None, principal_filter=None,
                                   host_filter=None),)), has(CAF)),
        32: (req(32, 4, resources=(n(m(32, 4).DescribeConfigsResource, resource_type=2,
                                     resource_name=TOPIC, configuration_keys=None),
                                   n(m(32, 4).DescribeConfigsResource, resource_type=4,
                                     resource_name="1", configuration_keys=None))),
             lambda r: [x.error_code for x in r.results] == [TAF, CAF] or pytest.fail(str(r))),
        33: (req(33, 2, resources=(n(m(33, 2).AlterConfigsResource, resource_type=2,
             resource_name=TOPIC, configs=(n(m(33, 2).AlterableConfig, name="retention.ms",
                                             value="1"),)),)), has(TAF)),
        34: (req(34, 2, dirs=(n(m(34, 2).AlterReplicaLogDir, path="/nowhere", topics=(
            n(m(34, 2).AlterReplicaLogDirTopic, name=TOPIC, partitions=(0,)),)),)), has(CAF)),
        35: (req(35, 4, topics=None), lambda r: (r.error_code == CAF and r.results == ())
             or pytest.fail(str(r))),
        37: (req(37, 3, timeout=5000 * MS, topics=(n(m(37, 3).CreatePartitionsTopic, name=TOPIC,
                                                      count=3, assignments=None),)), has(TAF)),
        42: (req(42, 2, groups_names=(GROUP,)), has(GAF)),
        43: (req(43, 2, timeout=5000 * MS, topic_partitions=None), has(CAF)),
        44: (req(44, 1, resources=(n(m(44, 1).AlterConfigsResource, resource_type=2,
             resource_name=TOPIC, configs=(n(m(44, 1).AlterableConfig, name="retention.ms",
                                             value="1", config_operation=0),)),)), has(TAF)),
        45: (req(45, 0, timeout=5000 * MS, topics=(n(m(45, 0).ReassignableTopic, name=TOPIC,
             partitions=(n(m(45, 0).ReassignablePartition, partition_index=0, replicas=None),)),)),
             has(CAF)),
        46: (req(46, 0, timeout=5000 * MS, topics=None), has(CAF)),
        47: (req(47, 0, group_id=GROUP, topics=(n(m(47, 0).OffsetDeleteRequestTopic, name=TOPIC,
             partitions=(n(m(47, 0).OffsetDeleteRequestPartition, partition_index=0),)),)), has(GAF)),
        # quotas (issue 23b) and SCRAM credentials (issue 22b): rows ready for when they are
        # served (the test sends only what the dispatch table serves)
        48: (req(48, 1, components=(), strict=False), has(CAF)),
        49: (req(49, 1, entries=(n(m(49, 1).EntryData, entity=(
            n(m(49, 1).EntityData, entity_type="user", entity_name="matrix"),), ops=(
            n(m(49, 1).OpData, key="producer_byte_rate", value=1000.0, remove=False),)),)),
             has(CAF)),
        50: (req(50, 0, users=None), has(CAF)),
        51: (req(51, 0, upsertions=(n(m(51, 0).ScramCredentialUpsertion, name="matrix",
                                      mechanism=1, iterations=8192, salt=b"s" * 16,
                                      salted_password=b"p" * 32),)), has(CAF)),
        56: (req(56, 3, broker_id=1, broker_epoch=-1), has(CAF)),
        60: (req(60, 1, include_cluster_authorized_operations=True),
             lambda r: r.cluster_authorized_operations == 0 or pytest.fail(str(r))),
        61: (req(61, 0, topics=(n(m(61, 0).TopicRequest, name=TOPIC, partition_indexes=(0,)),)),
             has(TAF)),
        65: (req(65, 0, transactional_ids=(TXN,)), has(XAF)),
        66: (req(66, 1, duration_filter=-1),
             lambda r: r.transaction_states == () or pytest.fail(str(r))),
        68: (req(68, 1, group_id=GROUP, member_id=uuid.uuid4().hex, member_epoch=0,
                 rebalance_timeout=10000 * MS, subscribed_topic_names=(TOPIC,), instance_id=None,
                 rack_id=None, subscribed_topic_regex=None, server_assignor=None,
                 topic_partitions=()), has(GAF)),
        69: (req(69, 1, group_ids=(GROUP,), include_authorized_operations=True), has(GAF)),
        74: (req(74, 1), has(CAF)),
        75: (req(75, 0, topics=(n(m(75, 0).TopicRequest, name=TOPIC),),
                 response_partition_limit=100, cursor=None), has(TAF)),
        76: (req(76, 1, group_id=GROUP, member_id=uuid.uuid4().hex, member_epoch=0,
                 subscribed_topic_names=(TOPIC,), rack_id=None), has(GAF)),
        77: (req(77, 1, group_ids=(GROUP,), include_authorized_operations=True), has(GAF)),
        78: (req(78, 1, group_id=GROUP, member_id=uuid.uuid4().hex, share_session_epoch=0,
                 max_wait=10 * MS, max_records=10, batch_size=10, topics=(
                     n(m(78, 1).FetchTopic, topic_id=tid, partitions=(
                         n(m(78, 1).FetchPartition, partition_index=0),)),)), has(GAF)),
        79: (req(79, 1, group_id=GROUP, member_id=uuid.uuid4().hex, share_session_epoch=1,
                 topics=(n(m(79, 1).AcknowledgeTopic, topic_id=tid, partitions=(
                     n(m(79, 1).AcknowledgePartition, partition_index=0),)),)), has(GAF)),
        83: (share_state(83, 0, "InitializeStateData"), has(CAF)),
        84: (share_state(84, 0, "ReadStateData"), has(CAF)),
        85: (share_state(85, 1, "WriteStateData"), has(CAF)),
        86: (share_state(86, 0, "DeleteStateData"), has(CAF)),
        87: (share_state(87, 1, "ReadStateSummaryData"), has(CAF)),
        90: (req(90, 1, groups=(n(m(90, 1).DescribeShareGroupOffsetsRequestGroup, group_id=GROUP,
                                  topics=None),)), has(GAF)),
        91: (req(91, 0, group_id=GROUP, topics=(n(m(91, 0).AlterShareGroupOffsetsRequestTopic,
             topic_name=TOPIC, partitions=(n(m(91, 0).AlterShareGroupOffsetsRequestPartition,
                                             partition_index=0, start_offset=0),)),)), has(GAF)),
        92: (req(92, 0, group_id=GROUP, topics=(
            n(m(92, 0).DeleteShareGroupOffsetsRequestTopic, topic_name=TOPIC),)), has(GAF)),
    }
    return rows


#: keys whose rows are authentication, not authorization (no ACL is consulted, as in Kafka)
UNCHECKED = {17, 36}


def test_every_api_key_has_a_row(world: World) -> None:
    served = set(dispatch.load_handlers()) - UNCHECKED
    missing = served - set(_rows(world))
    assert not missing, f"API keys without an authorization row: {sorted(missing)}"


def test_denied_everywhere_and_nothing_changes(world: World) -> None:
    before = _snapshot(world)
    rows = _rows(world)
    served = set(dispatch.load_handlers())
    failures = []
    for key in sorted(set(rows) & served):
        (api_key, version, request), check = rows[key]
        with SourceBoundConnection(world.broker.bootstrap, DENIED_HOST) as conn:
            resp = conn.request(api_key, version, **{f.name: getattr(request, f.name)
                                                     for f in fields(request)})  # fmt: skip
        try:
            check(resp)
        except (AssertionError, pytest.fail.Exception) as exc:
            failures.append(f"api key {api_key} v{version}: {exc}")
    assert not failures, "\n".join(failures)
    time.sleep(0.5)  # anything asynchronous a refused request might have started
    after = _snapshot(world)
    assert after == before
    assert before["offsets"] == (0, 5) and before["committed"] == 2  # 3 + 1 in a txn + marker
    assert before["partitions"] == 1 and before["retention"] == "86400000"
    assert (TXN, "CompleteCommit") in before["txns"] and GROUP in before["groups"]


def test_metadata_hides_without_leaking(world: World) -> None:
    unknown = f"never-{uuid.uuid4().hex[:6]}"
    with SourceBoundConnection(world.broker.bootstrap, DENIED_HOST) as conn:
        listed = conn.request(3, 12, topics=None, allow_auto_topic_creation=False,
                              include_topic_authorized_operations=False)
        named = conn.request(3, 12, topics=tuple(n(m(3, 12).MetadataRequestTopic, name=t)
                                                 for t in (TOPIC, unknown)),
                             allow_auto_topic_creation=False,
                             include_topic_authorized_operations=False)  # fmt: skip
        by_id = conn.request(3, 12, topics=(n(m(3, 12).MetadataRequestTopic, name=None,
                                              topic_id=world.topic_id),),
                             allow_auto_topic_creation=False,
                             include_topic_authorized_operations=False)  # fmt: skip
    assert [t.name for t in listed.topics] == []
    # an existing topic and a missing one get the same answer: existence is not revealed
    assert [(t.name, t.error_code, t.partitions) for t in named.topics] == [
        (TOPIC, TAF, ()), (unknown, TAF, ())]
    (t,) = by_id.topics
    assert (t.name, t.error_code) == (None, TAF)
    with WireConnection(world.broker.bootstrap) as conn:
        allowed = conn.request(3, 12, topics=None, allow_auto_topic_creation=False,
                               include_topic_authorized_operations=False)
    assert TOPIC in [t.name for t in allowed.topics]
