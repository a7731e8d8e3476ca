"""The console in headless Chromium (Debian's ``chromium`` + ``chromium-driver``, Selenium).

One browser session and one ``strom console`` process per module (plus a read-only console
for the last test). Selenium is pointed at the system browser and driver, so Selenium Manager
never downloads anything. Each page is saved as a PNG under ``$STROM_ARTIFACTS/console``
(default ``test-artifacts/`` in the repository) for CI to keep.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.console.helpers import (
    ConsoleProcess,
    commit,
    committed,
    create_topic,
    eventually,
    produce,
    topic_exists,
)

pytest.importorskip("selenium")
from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.support import expected_conditions  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)),
                       reason="needs Debian's chromium and chromium-driver packages"),
]
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def artifacts() -> Path:
    base = Path(os.environ.get("STROM_ARTIFACTS") or REPO / "test-artifacts")
    path = base / "console"
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager: never fetch a driver
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1360,1000", "--no-first-run", "--disable-extensions"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    driver.implicitly_wait(10)  # after a click, look-ups wait for the next page's elements
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def console(broker: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleProcess]:
    proc = ConsoleProcess(tmp_path_factory.mktemp("console"), broker.bootstrap,
                          ["--sample-interval", "1"])
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def shot(driver: WebDriver, artifacts: Path, name: str) -> None:
    """Save the whole page (the window grown to the document's height) as ``name``.png."""
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1360, max(700, min(int(height) + 40, 4000)))
    driver.save_screenshot(str(artifacts / f"{name}.png"))
    driver.set_window_size(1360, 1000)


def text(driver: WebDriver, css: str) -> str:
    return str(driver.find_element(By.CSS_SELECTOR, css).text)


def click_to_load(driver: WebDriver, element: Any) -> None:
    """Click ``element`` (a plain form's submit or a link) and wait until the page it loads
    replaced the current one and is complete: a read right after ``click()`` can otherwise meet
    the old page's nodes being detached ("Node ... does not belong to the document")."""
    old = driver.find_element(By.TAG_NAME, "html")
    element.click()
    WebDriverWait(driver, 15).until(expected_conditions.staleness_of(old))
    WebDriverWait(driver, 15).until(
        lambda d: d.execute_script("return document.readyState") == "complete")


def cells(driver: WebDriver, table_id: str) -> list[list[str]]:
    return [[td.text for td in tr.find_elements(By.TAG_NAME, "td")]
            for tr in driver.find_elements(By.CSS_SELECTOR, f"#{table_id} tbody tr")]


def test_overview_shows_the_broker(browser: WebDriver, console: ConsoleProcess, broker: Any,
                                   artifacts: Path, topic_name: str) -> None:
    create_topic(broker.bootstrap, topic_name, 2)
    produce(broker.bootstrap, topic_name, [(None, b"x")] * 50)
    browser.get(console.url + "/")
    assert browser.title == "Overview · strom"
    assert cells(browser, "brokers") == [["1", broker.bootstrap, "-", "controller"]]
    assert text(browser, "#offline") == "0" and text(browser, "#under-replicated") == "0"
    produce(broker.bootstrap, topic_name, [(None, b"y")] * 50)
    # the sparkline refreshes itself (1 s samples): wait for a measured rate on the page
    # the page's script replaces the box every second: read it in one step, never a stale node
    read = ("const box = document.getElementById('throughput');"
            "const n = box.querySelector('.samples'); const line = box.querySelector('polyline');"
            "return [n ? Number(n.textContent) : 0, line ? line.getAttribute('points') : ''];")
    rates, points = eventually(lambda: (lambda r: r if r[0] >= 3 else None)(
        browser.execute_script(read)), "three throughput rates", 30)
    assert len(points.split()) == rates
    shot(browser, artifacts, "01-overview")


def test_create_a_topic(browser: WebDriver, console: ConsoleProcess, broker: Any,
                        artifacts: Path, topic_name: str) -> None:
    browser.get(console.url + "/topics")
    browser.find_element(By.ID, "new-topic").click()
    form = browser.find_element(By.ID, "create-topic")
    form.find_element(By.NAME, "name").send_keys(topic_name)
    form.find_element(By.NAME, "partitions").send_keys("3")
    form.find_element(By.NAME, "configs").send_keys("retention.ms=7200000")
    shot(browser, artifacts, "02-create-topic-form")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    assert text(browser, ".notice.ok") == f"Created topic {topic_name}."
    assert text(browser, "#topic-name") == topic_name
    assert [r[0] for r in cells(browser, "partitions")] == ["0", "1", "2"]
    md = eventually(lambda: topic_exists(broker.bootstrap, topic_name), "topic in metadata")
    assert md
    shot(browser, artifacts, "03-topic-page")
    browser.get(console.url + "/topics")
    assert topic_name in [r[0] for r in cells(browser, "topics")]
    shot(browser, artifacts, "04-topics")
    browser.get(console.url + f"/topics/{topic_name}-missing")
    assert text(browser, "#error") == (f"cannot describe topic '{topic_name}-missing': Broker: "
                                       "Unknown topic or partition (UNKNOWN_TOPIC_OR_PART)")
    shot(browser, artifacts, "04b-error")


def test_produce_and_find_by_key(browser: WebDriver, console: ConsoleProcess, broker: Any,
                                 artifacts: Path, topic_name: str) -> None:
    create_topic(broker.bootstrap, topic_name, 3)
    produce(broker.bootstrap, topic_name,
            [(f"user-{i}", f'{{"user": {i}, "event": "click"}}') for i in range(40)])
    browser.get(f"{console.url}/topics/{topic_name}/messages")
    form = browser.find_element(By.ID, "produce")
    form.find_element(By.ID, "produce-key").send_keys("needle-7")
    form.find_element(By.ID, "produce-value").send_keys('{"order": 7, "items": ["tea"]}')
    form.find_element(By.ID, "produce-headers").send_keys("origin=browser")
    form.find_element(By.ID, "produce-submit").click()
    assert text(browser, ".notice.ok").startswith("Produced to partition ")
    browser.get(f"{console.url}/topics/{topic_name}/messages")
    key_filter = browser.find_element(By.ID, "key-filter")
    key_filter.clear()
    key_filter.send_keys("needle")
    Select(browser.find_element(By.ID, "mode")).select_by_value("earliest")
    click_to_load(browser, browser.find_element(By.ID, "search"))
    rows = cells(browser, "messages")
    assert len(rows) == 1
    assert rows[0][3] == "needle-7"
    assert rows[0][4].startswith('{\n  "order": 7,\n  "items": [\n    "tea"\n  ]\n}')
    assert rows[0][5] == "origin=browser"
    shot(browser, artifacts, "05-messages-found-by-key")
    browser.get(f"{console.url}/topics/{topic_name}/messages?limit=10")
    assert len(cells(browser, "messages")) == 10
    shot(browser, artifacts, "06-messages-latest")


def test_group_lag_then_reset(browser: WebDriver, console: ConsoleProcess, broker: Any,
                              artifacts: Path, topic_name: str) -> None:
    group = f"{topic_name}-readers"
    create_topic(broker.bootstrap, topic_name, 2)
    produce(broker.bootstrap, topic_name, [(None, b"a")] * 12, partition=0)
    produce(broker.bootstrap, topic_name, [(None, b"b")] * 5, partition=1)
    commit(broker.bootstrap, group, {(topic_name, 0): 2, (topic_name, 1): 5})
    browser.get(console.url + "/groups")
    row = [r for r in cells(browser, "groups") if r[0] == group]
    assert row == [[group, "classic", "Empty", "0", topic_name, "10"]]
    shot(browser, artifacts, "07-groups")
    browser.find_element(By.LINK_TEXT, group).click()
    assert [r[:5] for r in cells(browser, "lag")] == [
        [topic_name, "0", "2", "12", "10"], [topic_name, "1", "5", "5", "0"]]
    assert text(browser, "#total-lag") == "10"
    shot(browser, artifacts, "08-group-lag")

    Select(browser.find_element(By.ID, "reset-strategy")).select_by_value("offset")
    browser.find_element(By.ID, "reset-value").send_keys("4")
    browser.find_element(By.ID, "reset-dry-run").click()
    assert "Dry run: nothing has changed yet" in text(browser, "#dry-run-note")
    assert cells(browser, "plan") == [[topic_name, "0", "2", "4"], [topic_name, "1", "5", "4"]]
    assert committed(broker.bootstrap, group) == {(topic_name, 0): 2, (topic_name, 1): 5}
    shot(browser, artifacts, "09-reset-dry-run")
    browser.find_element(By.ID, "reset-apply").click()
    assert text(browser, ".notice.ok") == f"Reset 2 committed offset(s) of group {group}."
    assert committed(broker.bootstrap, group) == {(topic_name, 0): 4, (topic_name, 1): 4}
    assert [r[4] for r in cells(browser, "lag")] == ["8", "1"]
    shot(browser, artifacts, "10-group-after-reset")


def test_group_members_and_their_assignments(browser: WebDriver, console: ConsoleProcess,
                                            broker: Any, artifacts: Path, topic_name: str) -> None:
    from confluent_kafka import Consumer

    group = f"{topic_name}-live"
    create_topic(broker.bootstrap, topic_name, 2)
    produce(broker.bootstrap, topic_name, [(None, b"m")] * 6, partition=1)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                         "client.id": "browser-reader", "auto.offset.reset": "earliest",
                         "session.timeout.ms": 6000, "enable.auto.commit": False})  # fmt: skip
    try:
        consumer.subscribe([topic_name])
        eventually(lambda: consumer.poll(0.2) is None and len(consumer.assignment()) == 2,
                   "both partitions assigned")  # fmt: skip
        browser.get(console.url + "/groups")
        assert [r[:4] for r in cells(browser, "groups") if r[0] == group] == [
            [group, "classic", "Stable", "1"]]
        browser.find_element(By.LINK_TEXT, group).click()
        assert text(browser, "#group-state") == "Stable"
        members = cells(browser, "members")
        assert len(members) == 1 and members[0][1] == "browser-reader"
        assert members[0][3].split() == [f"{topic_name}-0", f"{topic_name}-1"]
        assert "stop its consumers before resetting" in text(browser, ".notice.warn")
        shot(browser, artifacts, "08b-group-members")
    finally:
        consumer.close()


def test_connectors_status_pause_resume(browser: WebDriver, broker: Any, artifacts: Path,
                                        tmp_path: Path, topic_name: str) -> None:
    from strom.testing.connect import ConnectWorkerProcess

    create_topic(broker.bootstrap, topic_name)
    (tmp_path / "in.txt").write_text("a\n")
    with ConnectWorkerProcess(tmp_path / "worker", broker.bootstrap) as worker:
        worker.request("PUT", "/connectors/files/config", {
            "connector.class": "FileStreamSource", "topic": topic_name,
            "file": str(tmp_path / "in.txt")})

        def state() -> tuple[str, list[str]]:
            _status, body = worker.request("GET", "/connectors/files/status")
            return body["connector"]["state"], [t["state"] for t in body["tasks"]]

        eventually(lambda: state() == ("RUNNING", ["RUNNING"]), "connector running")
        with ConsoleProcess(tmp_path, broker.bootstrap, ["--connect-url", worker.url]) as c:
            browser.get(c.url + "/")
            browser.find_element(By.LINK_TEXT, "Connectors").click()
            row = cells(browser, "connectors")[0]
            assert row[0].startswith("files") and row[1:3] == ["source", "RUNNING"]
            browser.find_element(By.CSS_SELECTOR, "button[value=pause]").click()
            assert text(browser, ".notice.ok") == "Asked to pause connector files."
            eventually(lambda: state() == ("PAUSED", ["PAUSED"]), "connector paused")
            browser.get(c.url + "/connectors")
            assert cells(browser, "connectors")[0][2] == "PAUSED"
            shot(browser, artifacts, "17-connectors-paused")
            browser.find_element(By.CSS_SELECTOR, "button[value=resume]").click()
            eventually(lambda: state() == ("RUNNING", ["RUNNING"]), "connector resumed")
        with ConsoleProcess(tmp_path, broker.bootstrap,
                            ["--read-only", "--connect-url", worker.url]) as ro:
            browser.implicitly_wait(0)
            try:
                browser.get(ro.url + "/connectors")
                assert cells(browser, "connectors")[0][2] == "RUNNING"
                assert browser.find_elements(By.CSS_SELECTOR, "[data-write], button") == []
                shot(browser, artifacts, "18-ro-connectors")
            finally:
                browser.implicitly_wait(10)


def test_read_only_hides_every_write_action(browser: WebDriver, broker: Any, artifacts: Path,
                                            tmp_path: Path, topic_name: str) -> None:
    create_topic(broker.bootstrap, topic_name)
    produce(broker.bootstrap, topic_name, [(b"k", b'{"v": 1}')])
    group = f"{topic_name}-g"
    commit(broker.bootstrap, group, {(topic_name, 0): 0})
    browser.implicitly_wait(0)  # most look-ups below expect nothing: do not wait for it
    with ConsoleProcess(tmp_path, broker.bootstrap, ["--read-only"]) as ro:
        pages = [("/", "ro-overview"), ("/topics", "ro-topics"),
                 (f"/topics/{topic_name}", "ro-topic"),
                 (f"/topics/{topic_name}/messages?mode=earliest", "ro-messages"),
                 ("/groups", "ro-groups"), (f"/group?name={group}", "ro-group")]
        for i, (path, name) in enumerate(pages):
            browser.get(ro.url + path)
            assert text(browser, "#read-only") == "read-only"
            writes = browser.find_elements(By.CSS_SELECTOR, "[data-write], form[method=post]")
            assert writes == [], path
            assert not browser.find_elements(By.CSS_SELECTOR, "input[type=submit]")
            buttons = [b.text for b in browser.find_elements(By.TAG_NAME, "button")]
            assert set(buttons) <= {"Show"}, (path, buttons)  # the browser's own search
            shot(browser, artifacts, f"{11 + i:02d}-{name}")
        status, body = ro.request("POST", f"/topics/{topic_name}/delete",
                                  data=f"confirm={topic_name}".encode(),
                                  headers={"Content-Type": "application/x-www-form-urlencoded"})
        assert (status, body) == (403, "strom console is read-only: changes are disabled")
        status, _ = ro.request("POST", f"/group/reset/apply?name={group}",
                               data=f"plan={topic_name}:0:1".encode())
        assert status == 403
    assert topic_exists(broker.bootstrap, topic_name)
    assert committed(broker.bootstrap, group) == {(topic_name, 0): 0}


def test_overview_of_a_cluster_with_racks_and_a_lost_broker(browser: WebDriver, artifacts: Path,
                                                            tmp_path: Path, topic_name: str) -> None:
    """Three brokers (ZooKeeper, strom.testing.cluster) on two racks: the overview lists each
    with its rack and the controller; one killed (kill -9), the partition it replicated shows
    under-replicated on the overview and on the topic page once the controller notices."""
    from strom.testing.cluster import ClusterProcess, broker_host
    from strom.testing.zookeeper import zookeeper_available

    if not zookeeper_available():
        pytest.skip("needs Debian's zookeeper package")
    racks = {1: "rack-a", 2: "rack-a", 3: "rack-b"}
    with ClusterProcess(tmp_path / "cluster", brokers=3, racks=racks, settings={
            "offsets.topic.replication.factor": "1", "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.num.partitions": "1"}) as cluster:
        cluster.create_topic(topic_name, 1, 3)
        cluster.wait_for_isr(topic_name, 0, {1, 2, 3})
        controller = cluster.controller_id()
        with ConsoleProcess(tmp_path, cluster.bootstrap, ["--read-only"]) as c:
            browser.get(c.url + "/")
            assert cells(browser, "brokers") == [
                [str(i), f"{broker_host(i)}:{cluster.broker(i).port}", racks[i],
                 "controller" if i == controller else ""] for i in (1, 2, 3)]
            assert text(browser, "#under-replicated") == "0"
            victim = next(i for i in (1, 2, 3) if i not in (controller,
                                                            cluster.leader_of(topic_name)))
            cluster.kill(victim)
            assert victim not in cluster.running_ids()
            cluster.wait_for_isr(topic_name, 0, {1, 2, 3} - {victim}, timeout=60)

            def under() -> bool:  # (internal topics of one replica on the victim go offline)
                browser.get(c.url + "/")
                items = [li.text for li in browser.find_elements(By.CSS_SELECTOR, "#unhealthy li")]
                return f"under-replicated: {topic_name}-0" in items

            eventually(under, "the overview shows the under-replicated partition", 30)
            shot(browser, artifacts, "19-cluster-overview")
            browser.get(f"{c.url}/topics/{topic_name}")
            row = cells(browser, "partitions")[0]
            assert sorted(row[2].replace(" ", "").split(",")) == ["1", "2", "3"]
            assert sorted(row[3].replace(" ", "").split(",")) == \
                sorted(str(i) for i in {1, 2, 3} - {victim})  # fmt: skip
            assert row[7] == "0 B"  # from its leader, though a bootstrap broker is gone
            shot(browser, artifacts, "20-cluster-topic")
            browser.get(f"{c.url}/topics")
            shot(browser, artifacts, "21-cluster-topics")
            assert [r[1:4] for r in cells(browser, "topics") if r[0] == topic_name] == \
                [["1", "3", "0 B"]]  # fmt: skip
            shot(browser, artifacts, "20-cluster-topic")
