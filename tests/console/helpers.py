"""Shared by the console tests: a ``strom console`` child process and cluster set-up."""

from __future__ import annotations

import re
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from strom.testing.process import ChildProcess, free_port

T = TypeVar("T")


class ConsoleProcess(ChildProcess):
    """``strom console`` on a free 127.0.0.1 port (stopped by its PID)."""

    name = "strom console"

    def __init__(self, work_dir: Path, bootstrap: str, extra_args: Sequence[str] = ()) -> None:
        self.port = free_port()
        self.bootstrap = bootstrap
        self.extra_args = list(extra_args)
        self.log_file = Path(work_dir) / f"console-{self.port}.log"
        self._proc = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [sys.executable, "-m", "strom", "console", "-b", self.bootstrap,
                "--listen", f"127.0.0.1:{self.port}", *self.extra_args]

    def request(self, method: str, path: str, data: bytes | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, str]:
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()


def eventually(check: Callable[[], T | None], what: str, timeout: float = 30.0) -> T:
    """``check()``'s first truthy result within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    client = admin(bootstrap)  # held: a collected client cancels its futures
    client.create_topics([NewTopic(name, partitions, 1)])[name].result(30)


def produce(bootstrap: str, topic: str, records: Sequence[tuple[Any, Any]],
            partition: int | None = None, headers: Any = None) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    for key, value in records:
        kwargs: dict[str, Any] = {"key": key, "value": value, "headers": headers}
        if partition is not None:
            kwargs["partition"] = partition
        p.produce(topic, **kwargs)
    assert p.flush(30) == 0


def commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """Commit ``offsets`` for ``group`` and leave it (an Empty group with committed offsets)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()],
                 asynchronous=False)
    finally:
        c.close()


def committed(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    """The group's committed offsets, read through the Kafka API."""
    client = admin(bootstrap)
    fut = client.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
    result = fut[group].result(30)
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions
            if tp.offset >= 0}


def topic_exists(bootstrap: str, name: str) -> bool:
    md = admin(bootstrap).list_topics(timeout=30)
    return name in md.topics and md.topics[name].error is None


def rows(html: str, table_id: str) -> list[list[str]]:
    """The text of each body row's cells of the table with this id."""
    body = html.split(f'id="{table_id}"', 1)[1].split("</table>", 1)[0]
    body = body.split("<tbody>", 1)[1]
    out = []
    for tr in re.findall(r"<tr[^>]*>(.*?)</tr>", body, re.S):
        cells = re.findall(r"<td[^>]*>(.*?)</td>", tr, re.S)
        out.append([re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", c)).strip() for c in cells])
    return out


def notice(html: str) -> str:
    m = re.search(r'class="notice ok"[^>]*>(.*?)</p>', html, re.S)
    return m.group(1).strip() if m else ""


def error(html: str) -> str:
    m = re.search(r'id="error">(.*?)</p>', html, re.S)
    return m.group(1).strip() if m else ""
