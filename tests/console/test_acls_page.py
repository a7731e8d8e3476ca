"""The console's ACL page against real brokers: the list, adding and deleting an ACL (checked
through the Kafka API), read-only mode, and a broker without an authorizer."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from strom.admin import acls
from strom.admin.session import ClientSettings, Session
from strom.console.app import build_app
from strom.console.cluster import Cluster
from strom.testing.process import BrokerProcess
from tests.console.helpers import notice, rows

BASE = "http://127.0.0.1"
STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(tmp_path_factory.mktemp("acl-console") / "data", settings={
        "authorizer.class.name": STANDARD, "super.users": "User:ANONYMOUS"})
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def stored(bootstrap: str) -> list[acls.AclRow]:
    session = Session(ClientSettings(bootstrap))
    try:
        return acls.describe(session, acls.filters(acls.AclSpec(pattern_type="any")))
    finally:
        session.close()


def test_add_list_delete(secured: BrokerProcess) -> None:
    with TestClient(build_app(Cluster(secured.bootstrap), sample=False), base_url=BASE) as c:
        assert rows(c.get("/acls").text, "acls") == [["No ACLs."]]
        resp = c.post("/acls", data={"principal": "User:alice", "permission": "allow",
                                     "operation": "Read", "resource_type": "topic",
                                     "name": "orders", "pattern_type": "prefixed", "host": ""})
        assert resp.status_code == 200 and "Added 1 ACL" in notice(resp.text)
        assert stored(secured.bootstrap) == [acls.AclRow("TOPIC", "orders", "PREFIXED",
                                                         "User:alice", "*", "READ", "ALLOW")]
        assert rows(c.get("/acls").text, "acls") == [
            ["TOPIC", "orders", "PREFIXED", "User:alice", "*", "READ", "ALLOW", "Delete"]]
        resp = c.post("/acls/delete", data={"resource_type": "TOPIC", "name": "orders",
                                            "pattern_type": "PREFIXED", "principal": "User:alice",
                                            "host": "*", "operation": "READ", "permission": "ALLOW"})
        assert "Deleted 1 ACL" in notice(resp.text)
        assert stored(secured.bootstrap) == []


def test_read_only(secured: BrokerProcess) -> None:
    app = build_app(Cluster(secured.bootstrap), read_only=True, sample=False)
    with TestClient(app, base_url=BASE) as c:
        page = c.get("/acls").text
        assert 'id="create-acl"' not in page and "/acls/delete" not in page
        resp = c.post("/acls", data={"principal": "User:eve", "operation": "All",
                                     "resource_type": "cluster"})
        assert resp.status_code == 403
    assert all(r.principal != "User:eve" for r in stored(secured.bootstrap))


def test_without_authorizer(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "data") as broker, TestClient(
            build_app(Cluster(broker.bootstrap), sample=False), base_url=BASE) as c:  # fmt: skip
        page = c.get("/acls").text
        assert 'id="acls-disabled"' in page and "SECURITY_DISABLED" in page
