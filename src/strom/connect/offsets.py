"""``GET/PATCH/DELETE /connectors/{n}/offsets`` (KIP-875): read and change a connector's offsets.

Source connectors' offsets are the worker's stored source offsets, in Kafka's shape
``{"partition": {...}, "offset": {...}}``; sink connectors' are the committed offsets of their
consumer group ``connect-<name>``, shown as ``{"partition": {"kafka_topic", "kafka_partition"},
"offset": {"kafka_offset"}}``. Changes are allowed only while the connector is STOPPED (400
otherwise, Kafka's message); a null offset removes a partition's offset.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from strom.connect.backing import MemoryOffsetBackingStore, OffsetBackingStore

NOT_STOPPED = (
    "Connectors must be in the STOPPED state before their offsets can be modified. This can "
    "be done for the specified connector by issuing a 'PUT' request to the "
    "'/connectors/{name}/stop' endpoint"
)


class OffsetsError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _admin(client: Mapping[str, str]) -> AdminClient:
    """An admin client with the worker's admin settings (strom.connect.client_configs)."""
    return AdminClient({**client, "socket.timeout.ms": 10000})


def read(kind: str, name: str, store: OffsetBackingStore, bootstrap: Mapping[str, str]) -> dict[str, Any]:
    if kind == "source":
        return {"offsets": [{"partition": p, "offset": o} for p, o in store.entries(name)]}
    group = ConsumerGroupTopicPartitions(f"connect-{name}")
    try:
        admin = _admin(bootstrap)  # kept referenced until the future completes
        result = admin.list_consumer_group_offsets([group])[group.group_id]
        partitions = result.result(15).topic_partitions or []
    except KafkaException as exc:
        raise OffsetsError(500, f"Failed to read the sink connector's offsets: {exc}") from None
    return {"offsets": [
        {"partition": {"kafka_topic": tp.topic, "kafka_partition": tp.partition},
         "offset": {"kafka_offset": tp.offset}}
        for tp in sorted(partitions, key=lambda t: (t.topic, t.partition)) if tp.offset >= 0]}


def alter(kind: str, name: str, body: Any, store: OffsetBackingStore, bootstrap: Mapping[str, str]) -> None:
    if not isinstance(body, dict) or not isinstance(body.get("offsets"), list):
        raise OffsetsError(400, "Offsets to alter must be given as {\"offsets\": [...]}")
    entries: list[tuple[dict[str, Any], Any]] = []
    for item in body["offsets"]:
        if not isinstance(item, dict) or not isinstance(item.get("partition"), dict):
            raise OffsetsError(400, "Each offset needs a \"partition\" object")
        entries.append((item["partition"], item.get("offset")))
    if kind == "source":
        assert isinstance(store, MemoryOffsetBackingStore)
        store.put_all_or_remove(name, entries)
        return
    tps = []
    for partition, offset in entries:
        try:
            topic, number = partition["kafka_topic"], int(partition["kafka_partition"])
            value = -1 if offset is None else int(offset["kafka_offset"])
        except (KeyError, TypeError, ValueError):
            raise OffsetsError(400, "Sink connector offsets need kafka_topic, "
                                    "kafka_partition and kafka_offset") from None
        if value < 0:
            raise OffsetsError(400, "Removing single sink partition offsets is not supported; "
                                    "reset all with DELETE")
        tps.append(TopicPartition(topic, number, value))
    group = ConsumerGroupTopicPartitions(f"connect-{name}", tps)
    try:
        admin = _admin(bootstrap)
        admin.alter_consumer_group_offsets([group])[group.group_id].result(15)
    except KafkaException as exc:
        raise OffsetsError(500, f"Failed to alter the sink connector's offsets: {exc}") from None


def reset(kind: str, name: str, store: OffsetBackingStore, bootstrap: Mapping[str, str]) -> None:
    if kind == "source":
        store.forget(name)
        return
    group = f"connect-{name}"
    try:
        admin = _admin(bootstrap)
        admin.delete_consumer_groups([group])[group].result(15)
    except KafkaException as exc:
        if "GROUP_ID_NOT_FOUND" not in str(exc):
            raise OffsetsError(500, f"Failed to reset the sink connector's offsets: "
                                    f"{exc}") from None
