"""ACLs in a cluster: created through one broker, they apply on every broker at once (each
watches the ACL change notifications in ZooKeeper), and their removal too, without a restart."""

from __future__ import annotations

from pathlib import Path

import pytest

from strom.admin.wire import WireConnection
from strom.protocol.errors import ErrorCode
from strom.protocol.messages import request_module
from strom.testing.cluster import ClusterProcess, wait_until
from strom.testing.samples import minimal
from strom.testing.zookeeper import zookeeper_available

pytestmark = pytest.mark.skipif(not zookeeper_available(), reason="needs the zookeeper package")
STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def _topic_code(bootstrap: str, topic: str) -> int:
    mod = request_module(3, 12)
    with WireConnection(bootstrap) as conn:
        resp = conn.request(3, 12, topics=(minimal(mod.MetadataRequestTopic, name=topic),),
                            allow_auto_topic_creation=False,
                            include_topic_authorized_operations=False)  # fmt: skip
    return int(resp.topics[0].error_code)



def test_acls_apply_on_every_broker_without_restart(tmp_path: Path) -> None:
    settings = {"authorizer.class.name": STANDARD, "allow.everyone.if.no.acl.found": "true"}
    with ClusterProcess(tmp_path, brokers=3, settings=settings) as cluster:
        first = cluster.broker(1).bootstrap
        mod = request_module(19, 5)
        with WireConnection(first) as conn:
            resp = conn.request(19, 5, timeout=30000, validate_only=False, topics=tuple(
                minimal(mod.CreatableTopic, name=name, num_partitions=1, replication_factor=3)
                for name in ("secret-orders", "public-orders")))  # fmt: skip
        assert [t.error_code for t in resp.topics] == [0, 0]
        everyone = [cluster.broker(i).bootstrap for i in (1, 2, 3)]
        for b in everyone:
            wait_until(lambda b=b: _topic_code(b, "secret-orders") == 0, 30, f"topic on {b}")

        # a DENY READ on the prefix, made through broker 1: DENY implies nothing, but an ACL now
        # covers the topic and nothing ALLOWs DESCRIBE, so allow.everyone no longer applies
        acl = request_module(30, 3)
        with WireConnection(first) as conn:
            created = conn.request(30, 3, creations=(minimal(
                acl.AclCreation, resource_type=2, resource_name="secret-", resource_pattern_type=4,
                principal="User:ANONYMOUS", host="*", operation=3, permission_type=2),))  # fmt: skip
        assert [r.error_code for r in created.results] == [0]
        for b in everyone:
            wait_until(lambda b=b: _topic_code(b, "secret-orders")
                       == ErrorCode.topic_authorization_failed, 15, f"ACL on {b}")  # fmt: skip
            assert _topic_code(b, "public-orders") == 0

        # removed through broker 3: every broker shows the topic again
        filt = request_module(31, 3)
        with WireConnection(cluster.broker(3).bootstrap) as conn:
            deleted = conn.request(31, 3, filters=(minimal(
                filt.DeleteAclsFilter, resource_type_filter=2, resource_name_filter="secret-",
                pattern_type_filter=4, principal_filter=None, host_filter=None, operation=1,
                permission_type=1),))  # fmt: skip
        assert [len(r.matching_acls) for r in deleted.filter_results] == [1]
        for b in everyone:
            wait_until(lambda b=b: _topic_code(b, "secret-orders") == 0, 15, f"no ACL on {b}")
