"""Admin look-ups shared by the group commands: states, descriptions, offsets."""

from __future__ import annotations

from typing import Any

from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from strom.cli.errors import CliError, timeout, wait_for

STATE_NAMES = {
    ConsumerGroupState.STABLE: "Stable",
    ConsumerGroupState.EMPTY: "Empty",
    ConsumerGroupState.DEAD: "Dead",
    ConsumerGroupState.PREPARING_REBALANCING: "PreparingRebalance",
    ConsumerGroupState.COMPLETING_REBALANCING: "CompletingRebalance",
    ConsumerGroupState.UNKNOWN: "Unknown",
}


def state_name(state: Any) -> str:
    """Kafka's spelling of a group state."""
    return STATE_NAMES.get(state, "Unknown")


def parse_state(value: str) -> ConsumerGroupState:
    """A state name (Kafka's spelling, any case) to the client enum."""
    for state, name in STATE_NAMES.items():
        if name.lower() == value.lower():
            return state
    raise CliError(f"unknown group state {value!r}: one of {', '.join(STATE_NAMES.values())}")


def describe_group(admin: AdminClient, group: str, bootstrap: str, must_exist: bool = True) -> Any:
    """The group's description; with ``must_exist`` a :class:`CliError` if there is none."""
    futures = admin.describe_consumer_groups([group], request_timeout=timeout())
    desc = wait_for(futures[group], f"cannot describe group {group!r}", bootstrap)
    if must_exist and desc.state == ConsumerGroupState.DEAD:
        raise CliError(f"consumer group {group!r} does not exist")
    return desc


def committed_offsets(admin: AdminClient, group: str, bootstrap: str) -> dict[tuple[str, int], int]:
    """(topic, partition) -> committed offset for every partition the group committed."""
    futures = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)], request_timeout=timeout()
    )
    result = wait_for(futures[group], f"cannot fetch offsets of group {group!r}", bootstrap)
    return {
        (tp.topic, tp.partition): tp.offset
        for tp in result.topic_partitions
        if tp.error is None and tp.offset >= 0
    }


def end_offsets(
    admin: AdminClient,
    partitions: list[tuple[str, int]],
    bootstrap: str,
    spec: OffsetSpec | None = None,
) -> dict[tuple[str, int], int]:
    """(topic, partition) -> log-end offset (or the offset for ``spec``)."""
    if not partitions:
        return {}
    spec = spec or OffsetSpec.latest()
    futures = admin.list_offsets(
        {TopicPartition(t, p): spec for t, p in partitions}, request_timeout=timeout()
    )
    return {
        (tp.topic, tp.partition): wait_for(
            fut, f"cannot list offsets of {tp.topic}-{tp.partition}", bootstrap
        ).offset
        for tp, fut in futures.items()
    }
