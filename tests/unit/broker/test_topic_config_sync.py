"""topic_config_sync: a topic's overrides changed in the registry (by another broker) are
applied to this broker's logs; new topics, partition changes and unchanged configs are not."""

from __future__ import annotations

import uuid
from typing import Any

from strom.broker import topic_config_sync
from strom.metadata.topics import TopicInfo


class FakeRegistry:
    def __init__(self, *infos: TopicInfo) -> None:
        self.infos = list(infos)
        self.listeners: list[Any] = []

    def __iter__(self) -> Any:
        return iter(self.infos)

    def add_listener(self, listener: Any) -> None:
        self.listeners.append(listener)

    def tell(self, name: str, info: TopicInfo | None) -> None:
        for listener in self.listeners:
            listener(name, info)


class FakeLogs:
    def __init__(self, refuse: bool = False) -> None:
        self.updates: list[tuple[str, dict[str, str]]] = []
        self.refuse = refuse

    def update_topic_config(self, topic: str, overrides: dict[str, str]) -> None:
        if self.refuse:
            raise ValueError("invalid")
        self.updates.append((topic, dict(overrides)))


def info(name: str, configs: dict[str, str], replicas: dict[int, list[int]] | None = None,
         topic_id: uuid.UUID | None = None) -> TopicInfo:  # fmt: skip
    return TopicInfo(name, topic_id or uuid.UUID(int=1), replicas or {0: [1, 2, 3]}, configs)


def test_a_changed_config_reaches_the_logs_once() -> None:
    registry, logs = FakeRegistry(info("t", {"min.insync.replicas": "2"})), FakeLogs()
    topic_config_sync.start(registry, logs)  # type: ignore[arg-type]
    registry.tell("t", info("t", {"min.insync.replicas": "2"}, {0: [1, 2, 3], 1: [2, 3, 1]}))
    assert logs.updates == []  # partitions added, same config
    registry.tell("t", info("t", {"min.insync.replicas": "3"}))
    registry.tell("t", info("t", {"min.insync.replicas": "3"}))
    assert logs.updates == [("t", {"min.insync.replicas": "3"})]
    registry.tell("t", info("t", {}))  # an override deleted: back to the broker default
    assert logs.updates[-1] == ("t", {})


def test_new_and_recreated_topics_are_left_to_log_creation() -> None:
    registry, logs = FakeRegistry(), FakeLogs()
    topic_config_sync.start(registry, logs)  # type: ignore[arg-type]
    registry.tell("n", info("n", {"retention.ms": "1000"}))
    registry.tell("n", None)
    registry.tell("n", info("n", {"retention.ms": "5"}, topic_id=uuid.UUID(int=2)))
    assert logs.updates == []


def test_a_config_this_broker_cannot_apply_is_logged_not_raised(caplog: Any) -> None:
    registry, logs = FakeRegistry(info("t", {})), FakeLogs(refuse=True)
    topic_config_sync.start(registry, logs)  # type: ignore[arg-type]
    registry.tell("t", info("t", {"segment.bytes": "1"}))
    assert "not applied here" in caplog.text
