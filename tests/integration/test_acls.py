"""ACLs end to end: ``strom acl`` with kafka-acls' options, real clients refused and allowed
as Kafka's StandardAuthorizer decides (prefixed and literal patterns, DENY over ALLOW,
allow.everyone.if.no.acl.found, implied DESCRIBE), changes applied without a restart, and
SECURITY_DISABLED without an authorizer."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from strom.admin.wire import WireConnection
from strom.protocol.errors import ErrorCode
from strom.testing.process import BrokerProcess
from tests.integration.cli_helpers import assert_clean_error, strom

STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """allow.everyone.if.no.acl.found: a resource no ACL names is open to everyone."""
    broker = BrokerProcess(tmp_path_factory.mktemp("acl") / "data", settings={
        "authorizer.class.name": STANDARD, "allow.everyone.if.no.acl.found": "true"})
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def acl(broker: BrokerProcess, *args: str) -> list[dict[str, Any]]:
    proc = strom("acl", *args, "-b", broker.bootstrap, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


def produce(broker: BrokerProcess, topic: str) -> int:
    """The error code of producing one message (0: stored)."""
    outcome: list[Any] = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "message.send.max.retries": 0})
    producer.produce(topic, b"x", partition=0, on_delivery=lambda err, _m: outcome.append(err))
    producer.flush(15)
    assert outcome, "no delivery report"
    return 0 if outcome[0] is None else int(outcome[0].code())


def test_clients_follow_the_acls_without_restart(secured: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": secured.bootstrap})
    topics = ["pay-1", "pay-secret", "other"]
    for f in admin.create_topics([NewTopic(t, 1, 1) for t in topics]).values():
        f.result(20)
    assert [produce(secured, t) for t in topics] == [0, 0, 0]  # no ACL: everyone

    made = acl(secured, "create", "--allow-principal", "User:ANONYMOUS", "--operation", "Write",
               "--topic", "pay", "--resource-pattern-type", "prefixed")  # fmt: skip
    assert made == [{"resource_type": "TOPIC", "name": "pay", "pattern_type": "PREFIXED",
                     "principal": "User:ANONYMOUS", "host": "*", "operation": "WRITE",
                     "permission": "ALLOW"}]  # fmt: skip
    acl(secured, "create", "--deny-principal", "User:ANONYMOUS", "--operation", "Write",
        "--topic", "pay-secret")
    # prefixed ALLOW applies; the literal DENY wins over it; no ACL on "other": allowed
    assert produce(secured, "pay-1") == 0
    assert produce(secured, "pay-secret") == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert produce(secured, "other") == 0

    # WRITE implies DESCRIBE, not READ: a consumer of pay-1 is refused
    consumer = Consumer({"bootstrap.servers": secured.bootstrap, "group.id": "readers",
                         "enable.auto.commit": False})  # fmt: skip
    consumer.assign([TopicPartition("pay-1", 0, 0)])
    errors = [m.error().code() for m in consumer.consume(10, 5) if m.error()]
    consumer.close()
    assert KafkaError.TOPIC_AUTHORIZATION_FAILED in errors

    removed = acl(secured, "delete", "--deny-principal", "User:ANONYMOUS", "--topic", "pay-secret")
    assert [(r["name"], r["permission"]) for r in removed] == [("pay-secret", "DENY")]
    assert produce(secured, "pay-secret") == 0  # at once: no restart
    listed = acl(secured, "list", "--topic", "pay", "--resource-pattern-type", "prefixed")
    assert [(r["name"], r["operation"]) for r in listed] == [("pay", "WRITE")]


def test_cli_shortcuts(secured: BrokerProcess) -> None:
    # the cluster gets an ACL below (IDEMPOTENT_WRITE for bob): from then on allow.everyone no
    # longer covers it, so the principal managing ACLs needs its own ALTER and DESCRIBE first
    acl(secured, "create", "--allow-principal", "User:ANONYMOUS", "--cluster", "--operation",
        "Alter", "--operation", "Describe")
    rows = acl(secured, "create", "--allow-principal", "User:bob", "--producer", "--topic",
               "orders", "--transactional-id", "tx-1", "--idempotent")  # fmt: skip
    assert {(r["resource_type"], r["name"], r["operation"]) for r in rows} == {
        ("TOPIC", "orders", "WRITE"), ("TOPIC", "orders", "DESCRIBE"),
        ("TOPIC", "orders", "CREATE"), ("TRANSACTIONAL_ID", "tx-1", "WRITE"),
        ("TRANSACTIONAL_ID", "tx-1", "DESCRIBE"), ("CLUSTER", "kafka-cluster", "IDEMPOTENT_WRITE")}
    rows = acl(secured, "create", "--allow-principal", "User:carol", "--consumer", "--topic",
               "orders", "--group", "billing")  # fmt: skip
    assert {(r["resource_type"], r["name"], r["operation"]) for r in rows} == {
        ("TOPIC", "orders", "READ"), ("TOPIC", "orders", "DESCRIBE"), ("GROUP", "billing", "READ")}
    mine = acl(secured, "list", "--principal", "User:carol")
    assert len(mine) == 3 and {r["principal"] for r in mine} == {"User:carol"}
    refused = strom("acl", "create", "-b", secured.bootstrap, "--allow-principal", "User:x",
                    "--operation", "Write", "--group", "g")  # fmt: skip
    assert "does not apply to GROUP" in assert_clean_error(refused)
    refused = strom("acl", "create", "-b", secured.bootstrap, "--consumer", "--topic", "t",
                    "--allow-principal", "User:x")  # fmt: skip
    assert "--group" in assert_clean_error(refused)


def test_no_authorizer_means_security_disabled(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "data") as broker:
        with WireConnection(broker.bootstrap) as conn:
            resp = conn.request(29, 3, resource_type_filter=1, resource_name_filter=None,
                                pattern_type_filter=1, principal_filter=None, host_filter=None,
                                operation=1, permission_type=1)  # fmt: skip
        assert resp.error_code == ErrorCode.security_disabled
        line = assert_clean_error(strom("acl", "list", "-b", broker.bootstrap))
        assert "security" in line.lower() or "authorizer" in line.lower(), line
        assert produce(broker, "anything") == 0  # everything allowed


def test_authorized_operations_kip430(secured: BrokerProcess) -> None:
    """What librdkafka's admin tests read: describe_cluster / describe_topics /
    describe_consumer_groups with include_authorized_operations."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AclOperation

    acl(secured, "create", "--allow-principal", "User:ANONYMOUS", "--cluster", "--operation",
        "Alter", "--operation", "Describe")  # first: the cluster then has ACLs (see above)
    admin = AdminClient({"bootstrap.servers": secured.bootstrap})
    admin.create_topics([NewTopic("ops-topic", 1, 1)])["ops-topic"].result(20)
    acl(secured, "create", "--allow-principal", "User:ANONYMOUS", "--consumer", "--topic",
        "ops-topic", "--group", "ops-group")
    consumer = Consumer({"bootstrap.servers": secured.bootstrap, "group.id": "ops-group",
                         "enable.auto.commit": False})  # fmt: skip
    consumer.commit(offsets=[TopicPartition("ops-topic", 0, 0)], asynchronous=False)
    consumer.close()

    cluster = admin.describe_cluster(include_authorized_operations=True).result(15)
    assert set(cluster.authorized_operations) == {AclOperation.ALTER, AclOperation.DESCRIBE}
    topic = admin.describe_topics(TopicCollection(["ops-topic"]),
                                  include_authorized_operations=True)["ops-topic"].result(15)
    assert set(topic.authorized_operations) == {AclOperation.READ, AclOperation.DESCRIBE}
    group = admin.describe_consumer_groups(["ops-group"], include_authorized_operations=True)[
        "ops-group"].result(15)
    assert set(group.authorized_operations) == {AclOperation.READ, AclOperation.DESCRIBE}


def test_kafka_python_acl_round_trip(secured: BrokerProcess) -> None:
    """kafka-python's own ACL integration test, step by step (its package ships no tests):
    create, describe with a filter, delete, describe again — through its protocol versions."""
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePattern,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as KResourceType
    from kafka.errors import NoError

    admin = KafkaAdminClient(bootstrap_servers=secured.bootstrap)
    try:
        entry = ACL(principal="User:test", host="*", operation=ACLOperation.READ,
                    permission_type=ACLPermissionType.ALLOW,
                    resource_pattern=ResourcePattern(KResourceType.TOPIC, "kp-topic"))  # fmt: skip
        result = admin.create_acls([entry])
        assert len(result["failed"]) == 0 and len(result["succeeded"]) == 1
        selector = ACLFilter(principal=None, host="*", operation=ACLOperation.ANY,
                             permission_type=ACLPermissionType.ANY,
                             resource_pattern=ResourcePatternFilter(
                                 KResourceType.TOPIC, "kp-topic", ACLResourcePatternType.LITERAL))  # fmt: skip
        found, error = admin.describe_acls(selector)
        assert error is NoError and [(a.principal, a.operation) for a in found] == [
            ("User:test", ACLOperation.READ)]
        deleted = admin.delete_acls([selector])
        assert len(deleted) == 1 and len(deleted[0][1]) == 1 and deleted[0][2] is NoError
        found, error = admin.describe_acls(selector)
        assert error is NoError and found == []
    finally:
        admin.close()


def test_acl_requests_validated_as_kafka(tmp_path: Path) -> None:
    """CreateAcls answers each creation on its own (a bad one INVALID_REQUEST, the others
    stored); a filter with an UNKNOWN element is INVALID_REQUEST; DeleteAcls reports, per
    filter, what it removed."""
    from strom.protocol.messages import request_module
    from strom.testing.samples import minimal

    settings = {"authorizer.class.name": STANDARD, "super.users": "User:ANONYMOUS"}
    with BrokerProcess(tmp_path / "data", settings=settings) as broker, \
            WireConnection(broker.bootstrap) as conn:  # fmt: skip
        make = request_module(30, 3).AclCreation

        def creation(**values: Any) -> Any:
            base = {"resource_type": 2, "resource_name": "t", "resource_pattern_type": 3,
                    "principal": "User:a", "host": "*", "operation": 3, "permission_type": 3}
            return minimal(make, **{**base, **values})

        created = conn.request(30, 3, creations=(
            creation(), creation(resource_type=4, resource_name="not-the-cluster"),
            creation(principal="no-type"), creation(operation=1),
            creation(resource_name="p", resource_pattern_type=4, permission_type=2)))  # fmt: skip
        assert [r.error_code for r in created.results] == [
            0, ErrorCode.invalid_request, ErrorCode.invalid_request, ErrorCode.invalid_request, 0]
        unknown = conn.request(29, 3, resource_type_filter=0, resource_name_filter=None,
                               pattern_type_filter=1, principal_filter=None, host_filter=None,
                               operation=1, permission_type=1)  # fmt: skip
        assert unknown.error_code == ErrorCode.invalid_request
        described = conn.request(29, 3, resource_type_filter=2, resource_name_filter="pay",
                                 pattern_type_filter=2, principal_filter=None, host_filter=None,
                                 operation=1, permission_type=1)  # fmt: skip
        # MATCH on "pay": the PREFIXED "p" applies to it, the LITERAL "t" does not
        assert [(r.resource_name, r.pattern_type) for r in described.resources] == [("p", 4)]
        filt = request_module(31, 3).DeleteAclsFilter
        deleted = conn.request(31, 3, filters=(
            minimal(filt, resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
                    principal_filter="User:a", host_filter=None, operation=3, permission_type=3),
            minimal(filt, resource_type_filter=2, resource_name_filter=None, pattern_type_filter=0,
                    principal_filter=None, host_filter=None, operation=1,
                    permission_type=1)))  # fmt: skip
        assert [(r.error_code, len(r.matching_acls)) for r in deleted.filter_results] == [
            (0, 1), (ErrorCode.invalid_request, 0)]
        left = conn.request(29, 3, resource_type_filter=1, resource_name_filter=None,
                            pattern_type_filter=1, principal_filter=None, host_filter=None,
                            operation=1, permission_type=1)  # fmt: skip
        assert [(r.resource_name, a.permission_type) for r in left.resources for a in r.acls] == [
            ("p", 2)]


@pytest.mark.parametrize(("setting", "said"), [
    ("authorizer.class.name=com.example.Mine", "is not supported"),
    ("allow.everyone.if.no.acl.found=maybe", "is not true or false"),
    ("super.users=alice", "is not a principal"),
])  # fmt: skip
def test_serve_refuses_bad_authorization_settings(tmp_path: Path, setting: str, said: str) -> None:
    from strom.testing import free_port

    proc = strom("serve", "--data-dir", str(tmp_path / "data"), "--listen",
                 f"127.0.0.1:{free_port()}", "--admin-listener=", "--set",
                 f"authorizer.class.name={STANDARD}", "--set", setting, timeout=30)  # fmt: skip
    assert proc.returncode == 2 and said in assert_clean_error(proc)


def test_share_fetch_refuses_only_the_unreadable_topic(secured: BrokerProcess) -> None:
    """KIP-932's ShareFetch / ShareAcknowledge: a topic the principal may not READ gets
    TOPIC_AUTHORIZATION_FAILED in its partitions, and the others are served (Kafka's answer)."""
    import uuid

    from strom.protocol.messages import request_module
    from strom.testing.samples import minimal

    admin = AdminClient({"bootstrap.servers": secured.bootstrap})
    for f in admin.create_topics([NewTopic(t, 1, 1) for t in ("sh-open", "sh-closed")]).values():
        f.result(20)
    with WireConnection(secured.bootstrap) as conn:
        meta = conn.request(3, 12, topics=tuple(minimal(request_module(3, 12).MetadataRequestTopic,
                                                        name=n) for n in ("sh-open", "sh-closed")),
                            allow_auto_topic_creation=False,
                            include_topic_authorized_operations=False)  # fmt: skip
        # the ids first: once the DENY exists nothing allows DESCRIBE, and Metadata hides it
        ids = {t.name: t.topic_id for t in meta.topics}
        acl(secured, "create", "--deny-principal", "User:ANONYMOUS", "--operation", "Read",
            "--topic", "sh-closed")
        mod = request_module(78, 1)
        member = uuid.uuid4().hex
        resp = conn.request(78, 1, group_id="sh-group", member_id=member, share_session_epoch=0,
                            max_wait=10, min_bytes=1, max_bytes=1 << 20, max_records=10,
                            batch_size=10, forgotten_topics_data=(), topics=tuple(
                                minimal(mod.FetchTopic, topic_id=ids[n], partitions=(
                                    minimal(mod.FetchPartition, partition_index=0),))
                                for n in ("sh-open", "sh-closed")))  # fmt: skip
        assert resp.error_code == 0, resp
        codes = {t.topic_id: [p.error_code for p in t.partitions] for t in resp.responses}
        assert codes[ids["sh-closed"]] == [ErrorCode.topic_authorization_failed]
        assert codes.get(ids["sh-open"], [0]) == [0]
        ack = request_module(79, 1)
        resp = conn.request(79, 1, group_id="sh-group", member_id=member, share_session_epoch=1,
                            topics=(minimal(ack.AcknowledgeTopic, topic_id=ids["sh-closed"],
                                            partitions=(minimal(
                                                ack.AcknowledgePartition, partition_index=0,
                                                acknowledgement_batches=(minimal(
                                                    ack.AcknowledgementBatch, first_offset=0,
                                                    last_offset=0, acknowledge_types=(1,)),)),)),))  # fmt: skip
        assert [p.error_code for t in resp.responses for p in t.partitions] == [
            ErrorCode.topic_authorization_failed]
