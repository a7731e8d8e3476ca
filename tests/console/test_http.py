"""The console's pages and actions over HTTP (Starlette's TestClient) against a real broker.

Every change made through the console is checked through the Kafka API (AdminClient,
committed offsets), and every read against what was produced.
"""

from __future__ import annotations

import csv
import io
import json
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.admin import ConfigResource
from starlette.testclient import TestClient

from strom.console import messages
from strom.console.app import build_app
from strom.console.cluster import Cluster
from strom.testing import free_port
from tests.console.helpers import (
    admin,
    commit,
    committed,
    create_topic,
    error,
    eventually,
    notice,
    produce,
    rows,
    topic_exists,
)

BASE = "http://127.0.0.1"


@pytest.fixture(scope="module")
def client(broker: Any) -> Iterator[TestClient]:
    app = build_app(Cluster(broker.bootstrap), sample=False)
    with TestClient(app, base_url=BASE) as c:
        yield c


@pytest.fixture(scope="module")
def read_only_client(broker: Any) -> Iterator[TestClient]:
    app = build_app(Cluster(broker.bootstrap), read_only=True, sample=False)
    with TestClient(app, base_url=BASE) as c:
        yield c


def test_overview_shows_broker_topics_and_groups(client: TestClient, broker: Any,
                                                topic_name: str) -> None:
    create_topic(broker.bootstrap, topic_name, 2)
    commit(broker.bootstrap, f"{topic_name}-g", {(topic_name, 0): 0})
    resp = client.get("/")
    assert resp.status_code == 200
    host, port = broker.bootstrap.split(":")
    brokers = rows(resp.text, "brokers")
    assert brokers == [["1", f"{host}:{port}", "-", "controller"]]
    topics_now = len([n for n in admin(broker.bootstrap).list_topics(timeout=10).topics
                      if not n.startswith("__")])
    assert f'id="topic-count">{topics_now}<' in resp.text
    assert 'id="offline">0<' in resp.text and 'id="under-replicated">0<' in resp.text
    states = dict((r[0], int(r[1])) for r in rows(resp.text, "group-states"))
    assert states.get("Empty", 0) >= 1
    assert "/static/console.css" in resp.text
    css = client.get("/static/console.css")
    assert css.status_code == 200 and "--accent" in css.text
    assert "http" not in client.get("/static/console.js").text.split("fetch(", 1)[0]


def test_create_topic_then_its_page(client: TestClient, broker: Any, topic_name: str) -> None:
    resp = client.post("/topics", data={"name": topic_name, "partitions": "3",
                                        "replication": "", "configs": "retention.ms=123456\n"})
    assert resp.status_code == 200 and resp.history[0].status_code == 303
    assert resp.url.path == f"/topics/{topic_name}"
    assert notice(resp.text) == f"Created topic {topic_name}."
    md = admin(broker.bootstrap).list_topics(topic_name, timeout=10).topics[topic_name]
    assert sorted(md.partitions) == [0, 1, 2]
    parts = rows(resp.text, "partitions")
    assert [r[:4] for r in parts] == [[str(p), "1", "1", "1"] for p in range(3)]
    configs = {r[0]: r for r in rows(resp.text, "configs")}
    assert 'value="123456"' in resp.text.split('data-config="retention.ms"', 1)[1][:600]
    assert configs["retention.ms"][2] == "DYNAMIC_TOPIC_CONFIG"
    listing = client.get("/topics")
    assert [r[1:3] for r in rows(listing.text, "topics") if r[0] == topic_name] == [["3", "1"]]


def test_create_topic_errors_are_one_line(client: TestClient, broker: Any,
                                          topic_name: str) -> None:
    resp = client.post("/topics", data={"name": "bad name!", "partitions": "1"})
    assert resp.status_code == 400
    assert error(resp.text).startswith("invalid topic name &#39;bad name!&#39;")
    create_topic(broker.bootstrap, topic_name)
    resp = client.post("/topics", data={"name": topic_name, "partitions": "1"})
    assert resp.status_code == 400
    assert "already exists" in error(resp.text) and "Traceback" not in resp.text
    resp = client.post("/topics", data={"name": topic_name + "x", "configs": "novalue"})
    assert resp.status_code == 400 and "expected KEY=VALUE" in error(resp.text)
    assert not topic_exists(broker.bootstrap, topic_name + "x")


def test_produce_then_find_by_key_and_export(client: TestClient, broker: Any,
                                            topic_name: str) -> None:
    create_topic(broker.bootstrap, topic_name, 3)
    produce(broker.bootstrap, topic_name, [(f"k{i}", f"v{i}") for i in range(30)])
    resp = client.post(f"/topics/{topic_name}/produce", data={
        "partition": "", "key": "order-42", "value": '{"id": 42, "item": "kettle"}',
        "headers": "source=console\ntrace=abc"})
    assert resp.status_code == 200
    m = re.match(r"Produced to partition (\d) at offset (\d+)\.", notice(resp.text))
    assert m, notice(resp.text)
    found = client.get(f"/topics/{topic_name}/messages", params={"key": "order-42",
                                                                 "mode": "earliest"})
    table = rows(found.text, "messages")
    assert len(table) == 1
    partition, offset, _ts, key, value, headers = table[0]
    assert (partition, offset) == m.groups() and key == "order-42"
    assert value.startswith('{ &#34;id&#34;: 42, &#34;item&#34;: &#34;kettle&#34; }')
    assert '<pre class="json">{\n  &#34;id&#34;: 42,' in found.text
    assert headers == "source = console trace = abc"
    exported = client.get(f"/topics/{topic_name}/messages/export",
                          params={"format": "json", "mode": "earliest", "key": "order-42"})
    assert exported.headers["content-disposition"].endswith(f'{topic_name}-messages.json"')
    docs = exported.json()
    assert len(docs) == 1
    assert docs[0]["key"] == "order-42" and json.loads(docs[0]["value"]) == {
        "id": 42, "item": "kettle"}
    assert docs[0]["headers"] == [["source", "console"], ["trace", "abc"]]
    assert (docs[0]["partition"], docs[0]["offset"]) == (int(m[1]), int(m[2]))
    as_csv = client.get(f"/topics/{topic_name}/messages/export",
                        params={"format": "csv", "mode": "earliest", "value": "v1"})
    lines = list(csv.DictReader(io.StringIO(as_csv.text)))
    assert sorted(r["value"] for r in lines) == sorted(f"v{i}" for i in range(30)
                                                       if "v1" in f"v{i}")
    assert all(r["topic"] == topic_name and r["key"] == "k" + r["value"][1:] for r in lines)
    listed = [r for r in rows(client.get("/topics").text, "topics") if r[0] == topic_name]
    assert listed[0][4] == "31"
    if hasattr(broker, "data_dir"):  # the size is the segments' bytes on disk
        on_disk = sum(f.stat().st_size for f in broker.data_dir.glob(f"{topic_name}-*/*.log"))
        assert on_disk > 0 and listed[0][3] == f"{on_disk} B"


def test_transactional_topic_ends_at_its_marker(client: TestClient, broker: Any,
                                                topic_name: str) -> None:
    """The last offset is a COMMIT marker, which no consumer sees: the page still ends."""
    from confluent_kafka import Producer

    create_topic(broker.bootstrap, topic_name)
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": topic_name})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(3):
        p.produce(topic_name, key=b"t", value=f"in-txn-{i}".encode())
    p.commit_transaction(30)
    started = time.monotonic()
    resp = client.get(f"/topics/{topic_name}/messages", params={"mode": "earliest"})
    assert time.monotonic() - started < messages.READ_DEADLINE_S
    assert [r[4].split(" text,")[0] for r in rows(resp.text, "messages")] == [
        "in-txn-0", "in-txn-1", "in-txn-2"]
    assert "End of the log reached" in resp.text and "Stopped early" not in resp.text
    nxt = re.search(r"cursor=0%3A(\d+)", resp.text)
    assert nxt and nxt.group(1) == "4"  # past the marker at offset 3


def test_pages_cover_the_log_once(client: TestClient, broker: Any, topic_name: str) -> None:
    """Following "next page" from the start reads every message exactly once."""
    create_topic(broker.bootstrap, topic_name, 3)
    produced = {f"m{i:03d}" for i in range(47)}
    produce(broker.bootstrap, topic_name, [(v, v) for v in sorted(produced)])
    seen: list[str] = []
    in_partition: dict[int, list[str]] = {}
    params = "mode=earliest&limit=10&view=text"
    for _ in range(10):
        resp = client.get(f"/topics/{topic_name}/messages?{params}")
        assert resp.status_code == 200
        page = rows(resp.text, "messages")
        if page and page[0][0] != "No messages here.":
            assert len(page) <= 10
            seen += [r[4].split(" text,")[0] for r in page]
            for r in page:
                in_partition.setdefault(int(r[0]), []).append(r[4].split(" text,")[0])
        nxt = re.search(r'href="/topics/[^"?]+/messages\?([^"]+)" id="next-page"', resp.text)
        assert nxt
        params = nxt.group(1).replace("&amp;", "&")
        if "End of the log reached" in resp.text and len(seen) == len(produced):
            break
    assert sorted(seen) == sorted(produced)
    one = client.get(f"/topics/{topic_name}/messages?partition=1&mode=earliest&limit=500"
                     "&view=text")
    only = rows(one.text, "messages")
    assert only and [int(r[1]) for r in only] == list(range(len(only)))
    assert [r[4].split(" text,")[0] for r in only] == in_partition[1]


def test_produce_to_a_partition_and_a_tombstone(client: TestClient, broker: Any,
                                                topic_name: str) -> None:
    create_topic(broker.bootstrap, topic_name, 2)
    resp = client.post(f"/topics/{topic_name}/produce",
                       data={"partition": "1", "key": "gone", "tombstone": "1", "value": "x"})
    assert notice(resp.text) == "Produced to partition 1 at offset 0."
    page = rows(client.get(f"/topics/{topic_name}/messages").text, "messages")
    assert [r[:2] + r[3:5] for r in page] == [["1", "0", "gone", "null (tombstone)"]]
    bad = client.post(f"/topics/{topic_name}/produce", data={"partition": "5", "value": "x"})
    assert bad.status_code == 400 and "cannot produce to" in error(bad.text)
    headers = client.post(f"/topics/{topic_name}/produce", data={"value": "x", "headers": "h"})
    assert headers.status_code == 400 and "expected NAME=VALUE" in error(headers.text)


def test_start_positions_and_views(client: TestClient, broker: Any, topic_name: str) -> None:
    create_topic(broker.bootstrap, topic_name, 1)
    produce(broker.bootstrap, topic_name, [(None, f"v{i}".encode()) for i in range(20)])
    produce(broker.bootstrap, topic_name, [(b"\x00\xff", b"\x01\x02\xfe")])

    def offsets(**params: Any) -> list[int]:
        resp = client.get(f"/topics/{topic_name}/messages", params=params)
        assert resp.status_code == 200, resp.text
        return [int(r[1]) for r in rows(resp.text, "messages") if len(r) > 1]

    assert offsets(mode="latest", limit=5) == [16, 17, 18, 19, 20]
    assert offsets(mode="earliest", limit=3) == [0, 1, 2]
    assert offsets(mode="offset", offset=12, limit=3) == [12, 13, 14]
    assert offsets(mode="offset", offset=999, limit=3) == []
    assert offsets(mode="timestamp", timestamp="2000-01-01T00:00:00Z", limit=2) == [0, 1]
    assert offsets(mode="timestamp", timestamp="2999-01-01T00:00:00Z", limit=2) == []
    binary = client.get(f"/topics/{topic_name}/messages", params={"mode": "offset",
                                                                  "offset": 20})
    assert '<pre class="hex">00 ff</pre>' in binary.text
    assert '<pre class="hex">01 02 fe</pre>' in binary.text
    hexed = client.get(f"/topics/{topic_name}/messages", params={
        "mode": "offset", "offset": 0, "limit": 1, "view": "hex"})
    assert '<pre class="hex">76 30</pre>' in hexed.text  # "v0"
    assert "null" in rows(hexed.text, "messages")[0][3]
    bad = client.get(f"/topics/{topic_name}/messages", params={"mode": "timestamp",
                                                               "timestamp": "yesterday"})
    assert bad.status_code == 400 and "expected ISO 8601" in error(bad.text)
    missing = client.get(f"/topics/{topic_name}/messages", params={"partition": "7"})
    assert missing.status_code == 400 and "has no partition 7" in error(missing.text)


def test_edit_and_reset_a_config(client: TestClient, broker: Any, topic_name: str) -> None:
    create_topic(broker.bootstrap, topic_name)
    resp = client.post(f"/topics/{topic_name}/config", data={
        "key": "retention.ms", "value": "3600000", "action": "set"})
    assert notice(resp.text) == "Set retention.ms = 3600000."

    def value() -> str:
        res = ConfigResource(ConfigResource.Type.TOPIC, topic_name)
        client = admin(broker.bootstrap)
        entries = client.describe_configs([res])[res].result(30)
        return str(entries["retention.ms"].value)

    assert value() == "3600000"
    resp = client.post(f"/topics/{topic_name}/config", data={
        "key": "retention.ms", "value": "soon", "action": "set"})
    assert resp.status_code == 400 and "retention.ms" in error(resp.text)
    assert value() == "3600000"
    resp = client.post(f"/topics/{topic_name}/config", data={
        "key": "retention.ms", "action": "reset"})
    assert notice(resp.text) == "Reset retention.ms."
    assert value() == "604800000"


def test_delete_topic_needs_its_name(client: TestClient, broker: Any, topic_name: str) -> None:
    create_topic(broker.bootstrap, topic_name)
    confirm = client.get(f"/topics/{topic_name}/delete")
    assert confirm.status_code == 200 and 'id="confirm-delete"' in confirm.text
    assert topic_exists(broker.bootstrap, topic_name)  # asking is not deleting
    wrong = client.post(f"/topics/{topic_name}/delete", data={"confirm": "other"})
    assert wrong.status_code == 400 and "to confirm" in error(wrong.text)
    assert topic_exists(broker.bootstrap, topic_name)
    done = client.post(f"/topics/{topic_name}/delete", data={"confirm": topic_name})
    assert notice(done.text) == f"Deleted topic {topic_name}."
    eventually(lambda: not topic_exists(broker.bootstrap, topic_name), "topic gone")


def test_group_lag_reset_and_delete(client: TestClient, broker: Any, topic_name: str) -> None:
    group = f"{topic_name}/g"  # a "/" in the name: groups travel in the query string
    create_topic(broker.bootstrap, topic_name, 2)
    produce(broker.bootstrap, topic_name, [(None, b"x")] * 10, partition=0)
    produce(broker.bootstrap, topic_name, [(None, b"y")] * 4, partition=1)
    commit(broker.bootstrap, group, {(topic_name, 0): 3, (topic_name, 1): 4})
    listing = rows(client.get("/groups").text, "groups")
    assert [r for r in listing if r[0] == group] == [[group, "classic", "Empty", "0", topic_name, "7"]]
    page = client.get("/group", params={"name": group})
    assert [r[:5] for r in rows(page.text, "lag")] == [
        [topic_name, "0", "3", "10", "7"], [topic_name, "1", "4", "4", "0"]]
    assert 'id="total-lag">7<' in page.text

    plan = client.post(f"/group/reset?name={group.replace('/', '%2F')}",
                       data={"topic": topic_name, "strategy": "earliest", "value": ""})
    assert plan.status_code == 200 and "Dry run: nothing has changed" in plan.text
    assert [r for r in rows(plan.text, "plan")] == [[topic_name, "0", "3", "0"],
                                                     [topic_name, "1", "4", "0"]]
    assert committed(broker.bootstrap, group) == {(topic_name, 0): 3, (topic_name, 1): 4}
    encoded = re.search(r'name="plan" value="([^"]*)"', plan.text).group(1)
    applied = client.post(f"/group/reset/apply?name={group.replace('/', '%2F')}",
                          data={"plan": encoded.replace("&#10;", "\n")})
    assert notice(applied.text) == f"Reset 2 committed offset(s) of group {group}."
    assert committed(broker.bootstrap, group) == {(topic_name, 0): 0, (topic_name, 1): 0}

    to_offset = client.post("/group/reset", params={"name": group},
                            data={"topic": "", "strategy": "offset", "value": "6"})
    assert [r[3] for r in rows(to_offset.text, "plan")] == ["6", "4"]  # clamped to the log
    for strategy, value in (("latest", ""), ("datetime", "2999-01-01T00:00:00Z")):
        plan = client.post("/group/reset", params={"name": group},
                           data={"strategy": strategy, "value": value})
        assert [r[3] for r in rows(plan.text, "plan")] == ["10", "4"], strategy
    past = client.post("/group/reset", params={"name": group},
                       data={"strategy": "datetime", "value": "2000-01-01T00:00:00"})
    assert [r[3] for r in rows(past.text, "plan")] == ["0", "0"]
    assert committed(broker.bootstrap, group) == {(topic_name, 0): 0, (topic_name, 1): 0}
    bad = client.post("/group/reset", params={"name": group},
                      data={"strategy": "offset", "value": "six"})
    assert bad.status_code == 400 and "expected an integer" in error(bad.text)

    gone = client.post("/group/delete", params={"name": group}, data={"confirm": group})
    assert notice(gone.text) == f"Deleted consumer group {group}."
    assert committed(broker.bootstrap, group) == {}


def test_reset_refused_while_the_group_is_active(client: TestClient, broker: Any,
                                                 topic_name: str) -> None:
    from confluent_kafka import Consumer

    create_topic(broker.bootstrap, topic_name)
    group = f"{topic_name}-active"
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                         "session.timeout.ms": 6000})
    try:
        consumer.subscribe([topic_name])
        eventually(lambda: consumer.poll(0.2) is None and consumer.assignment(), "assignment")
        page = client.get("/group", params={"name": group})
        members = rows(page.text, "members")
        assert len(members) == 1 and f"{topic_name}-0" in members[0][3]
        resp = client.post("/group/reset", params={"name": group},
                           data={"strategy": "earliest"})
        assert resp.status_code == 400 and "it is active" in error(resp.text)
    finally:
        consumer.close()


def test_read_only_hides_and_refuses_writes(read_only_client: TestClient, broker: Any,
                                            topic_name: str) -> None:
    create_topic(broker.bootstrap, topic_name)
    produce(broker.bootstrap, topic_name, [(b"k", b"v")])
    group = f"{topic_name}-g"
    commit(broker.bootstrap, group, {(topic_name, 0): 0})
    for path in ["/", "/topics", f"/topics/{topic_name}", f"/topics/{topic_name}/messages",
                 "/groups", f"/group?name={group}"]:
        html = read_only_client.get(path).text
        assert 'id="read-only"' in html, path
        assert "data-write" not in html and 'method="post"' not in html, path
    for path, data in [("/topics", {"name": topic_name + "-new"}),
                       (f"/topics/{topic_name}/delete", {"confirm": topic_name}),
                       (f"/topics/{topic_name}/produce", {"value": "x"}),
                       (f"/topics/{topic_name}/config", {"key": "retention.ms", "value": "1"}),
                       (f"/group/reset/apply?name={group}", {"plan": f"{topic_name}:0:1"}),
                       (f"/group/delete?name={group}", {"confirm": group})]:
        resp = read_only_client.post(path, data=data)
        assert resp.status_code == 403 and "read-only" in resp.text, path
    assert topic_exists(broker.bootstrap, topic_name)
    assert not topic_exists(broker.bootstrap, topic_name + "-new")
    assert committed(broker.bootstrap, group) == {(topic_name, 0): 0}
    end = admin(broker.bootstrap).list_topics(topic_name, timeout=10)
    assert end.topics[topic_name].error is None


def test_cross_site_post_refused(client: TestClient, broker: Any, topic_name: str) -> None:
    resp = client.post("/topics", data={"name": topic_name},
                       headers={"Origin": "http://evil.example"})
    assert resp.status_code == 403 and "another site" in resp.text
    assert not topic_exists(broker.bootstrap, topic_name)
    same = client.post("/topics", data={"name": topic_name}, headers={"Origin": BASE})
    assert same.status_code == 200 and topic_exists(broker.bootstrap, topic_name)


def test_unreachable_broker_is_a_readable_page() -> None:
    app = build_app(Cluster(f"127.0.0.1:{free_port()}", timeout=2.0), sample=False)
    with TestClient(app, base_url=BASE) as c:
        resp = c.get("/topics")
    assert resp.status_code == 400
    assert error(resp.text).startswith("cannot reach the broker at 127.0.0.1:")
    assert "Traceback" not in resp.text


def test_connectors_page_needs_a_connect_url(client: TestClient) -> None:
    resp = client.get("/connectors")
    assert resp.status_code == 400 and "--connect-url" in error(resp.text)
    assert ">Connectors</a>" not in client.get("/").text


def test_share_groups_pages_and_delete(client: TestClient, broker: Any, topic_name: str) -> None:
    from tests.integration.share_helpers import Worker, set_group_configs, wait_for

    group = f"{topic_name}/queue"
    create_topic(broker.bootstrap, topic_name)
    set_group_configs(broker.bootstrap, group, share_auto_offset_reset="earliest")
    produce(broker.bootstrap, topic_name, [(None, b"job")] * 6, partition=0)
    worker = Worker(broker.bootstrap, group, topic_name, "w").start()
    try:
        wait_for(lambda: len(worker.deliveries) >= 6, 30, "the 6 jobs")
        live = client.get("/share-group", params={"name": group})
        assert [r[4] for r in rows(live.text, "members")] == [f"{topic_name}-0"]
        assert 'id="group-state">Stable<' in live.text
    finally:
        worker.stop()
    produce(broker.bootstrap, topic_name, [(None, b"more")] * 4, partition=0)
    listing = eventually(lambda: [r for r in rows(client.get("/share-groups").text, "share-groups")
                                  if r[0] == group and r[4] == "4"], "the share group listed")  # fmt: skip
    assert listing == [[group, "Empty", "0", topic_name, "4"]]
    page = client.get("/share-group", params={"name": group})
    assert rows(page.text, "offsets") == [[topic_name, "0", "6", "4"]]
    assert 'id="total-lag">4<' in page.text
    refused = client.post("/share-group/delete", params={"name": group}, data={"confirm": "x"})
    assert refused.status_code == 400 and "type the group name" in error(refused.text)
    gone = client.post("/share-group/delete", params={"name": group}, data={"confirm": group})
    assert notice(gone.text) == f"Deleted share group {group}."
    assert [r for r in rows(client.get("/share-groups").text, "share-groups") if r[0] == group] == []


def test_a_kip848_group_shows_its_type_and_state(client: TestClient, broker: Any,
                                                 topic_name: str) -> None:  # fmt: skip
    from confluent_kafka import Consumer

    create_topic(broker.bootstrap, topic_name, 1)
    group = f"{topic_name}-848"
    member = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                       "group.protocol": "consumer"})  # fmt: skip
    try:
        member.subscribe([topic_name])
        deadline = time.monotonic() + 30
        while not member.assignment():
            assert time.monotonic() < deadline, "no assignment"
            member.poll(0.1)
        listing = rows(client.get("/groups").text, "groups")
        assert [r[:4] for r in listing if r[0] == group] == [[group, "consumer", "Stable", "1"]]
        page = client.get("/group", params={"name": group})
        assert 'id="group-type">consumer<' in page.text and 'id="group-state">Stable<' in page.text
    finally:
        member.close()
