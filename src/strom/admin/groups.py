"""Consumer groups: listings, descriptions, committed offsets and lag, offset resets, deletion.

Results are frozen dataclasses whose fields are the names (and the order) of the CLI's JSON
output. A group's offsets are moved only while it has no members (they would overwrite them):
:func:`check_inactive` refuses otherwise, as Kafka's tool does.

Every listing and description carries the group's type, ``classic`` or ``consumer`` (KIP-848).
A consumer group's states (Assigning, Reconciling) are not in confluent-kafka's enum, so its
state is read from its coordinator with ConsumerGroupDescribe (:func:`consumer_group_states`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    ConsumerGroupType,
    TopicPartition,
)

from strom.admin import routing
from strom.admin.errors import AdminError, InvalidInputError, NotFoundError, RefusedError
from strom.admin.offsets import Key, at_time, end_offsets, log_starts
from strom.admin.session import Session
from strom.admin.wire import request

STATE_NAMES = {
    ConsumerGroupState.STABLE: "Stable",
    ConsumerGroupState.EMPTY: "Empty",
    ConsumerGroupState.DEAD: "Dead",
    ConsumerGroupState.PREPARING_REBALANCING: "PreparingRebalance",
    ConsumerGroupState.COMPLETING_REBALANCING: "CompletingRebalance",
    ConsumerGroupState.UNKNOWN: "Unknown",
}
#: KIP-848 groups' states (ListGroups v4+ and ConsumerGroupDescribe name them)
CONSUMER_STATES = ("Empty", "Assigning", "Reconciling", "Stable", "Dead")
INACTIVE = ("Empty", "Dead")
GROUP_KEY = 0  # FindCoordinator key_type of a group
CONSUMER_GROUP_DESCRIBE = 69


def type_name(group_type: object) -> str:
    """``classic`` or ``consumer`` (``unknown`` when the broker does not say)."""
    name = getattr(group_type, "name", None)
    return str(name).lower() if name else "unknown"


def state_name(state: object) -> str:
    """Kafka's spelling of a group state."""
    return STATE_NAMES.get(state, "Unknown")  # type: ignore[call-overload]


def parse_state(value: str) -> ConsumerGroupState:
    """A state name (Kafka's spelling, any case) to the client enum."""
    for state, name in STATE_NAMES.items():
        if name.lower() == value.lower():
            return state
    raise InvalidInputError(
        f"unknown group state {value!r}: one of "
        f"{', '.join(dict.fromkeys([*STATE_NAMES.values(), *CONSUMER_STATES]))}"
    )


@dataclass(frozen=True)
class GroupListing:
    group: str
    state: str
    simple: bool
    type: str = "classic"


@dataclass(frozen=True)
class Node:
    id: int
    host: str
    port: int

    def __str__(self) -> str:
        """``host:port (id)``, as kafka-consumer-groups.sh shows a coordinator."""
        return f"{self.host}:{self.port} ({self.id})"


@dataclass(frozen=True)
class Member:
    member_id: str
    client_id: str
    host: str
    instance_id: str | None
    assignment: list[Key]


@dataclass(frozen=True)
class GroupDescription:
    group: str
    state: str
    members: list[Member]
    coordinator: Node | None
    assignor: str | None
    type: str = "classic"

    @property
    def inactive(self) -> bool:
        """No member can overwrite its offsets (Empty or Dead, and no members)."""
        return self.state in INACTIVE and not self.members


@dataclass(frozen=True)
class OffsetRow:
    """One partition the group reads (committed or assigned), or, with ``topic`` None, a
    member without partitions. Unknown values are None (kafka-consumer-groups.sh's ``-``)."""

    group: str
    topic: str | None
    partition: int | None
    current_offset: int | None
    log_end_offset: int | None
    lag: int | None
    consumer_id: str | None
    host: str | None
    client_id: str | None


def list_groups(session: Session, state: str | None = None,
                group_type: str | None = None) -> list[GroupListing]:  # fmt: skip
    """Every classic and consumer group (only those in ``state``, Kafka's spelling, and of
    ``group_type``, if given), by id, as kafka-consumer-groups.sh lists them (share groups are
    :mod:`strom.admin.share_groups`')."""
    kwargs: dict[str, object] = {"request_timeout": session.timeout,
                                 "types": {ConsumerGroupType.CLASSIC, ConsumerGroupType.CONSUMER}}
    if group_type and group_type.lower() not in ("classic", "consumer"):
        raise InvalidInputError(f"unknown group type {group_type!r}: classic or consumer")
    wanted_state = state.lower() if state else None
    if state and state.lower() in (s.lower() for s in STATE_NAMES.values()):
        kwargs["states"] = {parse_state(state)}
    elif state and state.lower() not in (s.lower() for s in CONSUMER_STATES):
        parse_state(state)  # the error naming every state
    listings = _listings(session, kwargs)
    return [g for g in listings
            if (wanted_state is None or g.state.lower() == wanted_state)
            and (group_type is None or g.type == group_type.lower())]  # fmt: skip


def _listings(session: Session, kwargs: dict[str, object]) -> list[GroupListing]:
    result = session.wait(session.admin.list_consumer_groups(**kwargs), "cannot list groups")
    listed = sorted(result.valid, key=lambda g: g.group_id)
    kinds = {g.group_id: type_name(getattr(g, "type", None)) for g in listed}
    exact = consumer_group_states(session, [g for g, t in kinds.items() if t == "consumer"])
    return [GroupListing(g.group_id, exact.get(g.group_id) or state_name(g.state),
                         bool(g.is_simple_consumer_group), kinds[g.group_id])
            for g in listed]  # fmt: skip


def consumer_group_states(session: Session, group_ids: list[str]) -> dict[str, str]:
    """The state of each KIP-848 group, from its coordinator's ConsumerGroupDescribe (a group
    whose coordinator does not answer in time is left out)."""
    if not group_ids:
        return {}
    candidates = [b.strip() for b in session.bootstrap.split(",") if b.strip()]

    def lookup(ids: list[str]) -> routing.Lookup[str]:
        return routing.coordinators(candidates, GROUP_KEY, ids, session.timeout)

    def send(where: str, ids: list[str]) -> routing.Answers[str]:
        resp = request(where, CONSUMER_GROUP_DESCRIBE, 0, wait_s=session.timeout,
                       group_ids=tuple(ids), include_authorized_operations=False)  # fmt: skip
        return {str(g.group_id): (int(g.error_code), str(g.group_state)) for g in resp.groups}

    try:
        done, _failed = routing.route(group_ids, lookup, send, routing.COORDINATOR_RETRIABLE,
                                      session.timeout)  # fmt: skip
    except AdminError:
        return {}
    return {g: state for g, (code, state) in done.items() if code == 0}


def describe_groups(session: Session, groups: list[str]) -> dict[str, GroupDescription]:
    """Each group's description (a group that does not exist is state Dead)."""
    if not groups:
        return {}
    futures = session.admin.describe_consumer_groups(groups, request_timeout=session.timeout)
    descs = {g: session.wait(futures[g], f"cannot describe group {g!r}") for g in groups}
    kinds = {g: type_name(getattr(d, "type", None)) for g, d in descs.items()}
    exact = consumer_group_states(session, [g for g, t in kinds.items() if t == "consumer"])
    result = {}
    for group in groups:
        desc = descs[group]
        coord = desc.coordinator
        result[group] = GroupDescription(
            group=group,
            state=exact.get(group) or state_name(desc.state),
            members=[
                Member(m.member_id, m.client_id, m.host, getattr(m, "group_instance_id", None),
                       sorted((tp.topic, tp.partition) for tp in
                              (m.assignment.topic_partitions if m.assignment else [])))
                for m in desc.members
            ],
            coordinator=Node(coord.id, coord.host, coord.port) if coord is not None else None,
            assignor=desc.partition_assignor or None,
            type=kinds[group] if kinds[group] != "unknown" else "classic",
        )  # fmt: skip
    return result


def describe_group(session: Session, group: str, must_exist: bool = True) -> GroupDescription:
    """The group's description; with ``must_exist`` a :class:`NotFoundError` if there is
    none."""
    desc = describe_groups(session, [group])[group]
    if must_exist and desc.state == "Dead":
        raise NotFoundError(f"consumer group {group!r} does not exist")
    return desc


def committed_offsets(session: Session, group: str) -> dict[Key, int]:
    """(topic, partition) -> committed offset for every partition the group committed."""
    futures = session.admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)], request_timeout=session.timeout
    )
    result = session.wait(futures[group], f"cannot fetch offsets of group {group!r}")
    return {
        (tp.topic, tp.partition): tp.offset
        for tp in result.topic_partitions
        if tp.error is None and tp.offset >= 0
    }


def offset_rows(session: Session, desc: GroupDescription) -> list[OffsetRow]:
    """One row per partition of every topic the group reads (committed or assigned), those
    without a commit too (current offset and lag None), then members without partitions."""
    committed = committed_offsets(session, desc.group)
    owner: dict[Key, Member] = {}
    idle = []
    for member in desc.members:
        for key in member.assignment:
            owner[key] = member
        if not member.assignment:
            idle.append(member)
    known = set(committed) | set(owner)
    topics = session.metadata().topics
    for name in {t for t, _p in known}:
        if name in topics and topics[name].error is None:
            known |= {(name, p) for p in topics[name].partitions}
    keys = sorted(known)
    leo = end_offsets(session, keys)
    rows = []
    for key in keys:
        current = committed.get(key)
        end = leo.get(key)
        owned = owner.get(key)
        rows.append(OffsetRow(
            group=desc.group, topic=key[0], partition=key[1], current_offset=current,
            log_end_offset=end,
            lag=end - current if current is not None and end is not None else None,
            consumer_id=owned.member_id if owned else None,
            host=owned.host if owned else None,
            client_id=owned.client_id if owned else None,
        ))  # fmt: skip
    for member in idle:
        rows.append(OffsetRow(desc.group, None, None, None, None, None, member.member_id,
                              member.host, member.client_id))  # fmt: skip
    return rows


def total_lag(rows: list[OffsetRow]) -> int:
    """The sum of the known lags (partitions without a commit count as none, as in rpk)."""
    return sum(r.lag for r in rows if r.lag is not None)


@dataclass(frozen=True)
class GroupSummary:
    """A group with its member count, the topics it committed to, and its total lag over
    the committed partitions."""

    group: str
    state: str
    members: int
    topics: list[str]
    lag: int
    type: str = "classic"


def summaries(session: Session) -> list[GroupSummary]:
    """Every group with its state, member count and total lag (committed partitions)."""
    listings = list_groups(session)
    descriptions = describe_groups(session, [g.group for g in listings])
    rows = []
    for listing in listings:
        desc = descriptions[listing.group]
        committed = committed_offsets(session, listing.group)
        end = end_offsets(session, sorted(committed))
        rows.append(GroupSummary(
            group=listing.group, state=desc.state, members=len(desc.members),
            topics=sorted({t for t, _p in committed}),
            lag=sum(max(end[k] - off, 0) for k, off in committed.items() if k in end),
            type=desc.type,
        ))  # fmt: skip
    return rows


def delete_groups(session: Session, groups: list[str]) -> None:
    """Delete groups (the broker refuses groups that still have members)."""
    futures = session.admin.delete_consumer_groups(groups, request_timeout=session.timeout)
    for group in groups:
        session.wait(futures[group], f"cannot delete group {group!r}")


# -- resetting offsets -----------------------------------------------------------------------

ResetKind = Literal["earliest", "latest", "offset", "shift", "datetime"]


@dataclass(frozen=True)
class ResetTo:
    """Where :func:`reset_plan` moves each partition: the log start or end, an offset, the
    committed offset shifted by ``value``, or the first offset at or after ``value`` (epoch
    ms). Every target is clamped to the log, as Kafka's tool does."""

    kind: ResetKind
    value: int = 0


def check_inactive(desc: GroupDescription) -> None:
    """Refuse to move the offsets of a group that has members (they would overwrite them)."""
    if desc.members or desc.state not in INACTIVE:
        raise RefusedError(
            f"cannot reset offsets of group {desc.group!r}: it is active (state "
            f"{desc.state}, {len(desc.members)} member(s)); stop its consumers first"
        )


def parse_topic_spec(spec: str) -> tuple[str, list[int] | None]:
    """``T`` or ``T:0,2`` to (topic, partitions or None for all)."""
    topic, sep, parts = spec.partition(":")
    if not topic:
        raise InvalidInputError(f"invalid --topic {spec!r}: expected TOPIC or TOPIC:P,P")
    if not sep:
        return topic, None
    try:
        return topic, [int(p) for p in parts.split(",") if p.strip()]
    except ValueError:
        raise InvalidInputError(f"invalid --topic {spec!r}: partitions must be integers") from None


def reset_partitions(session: Session, group: str, committed: dict[Key, int],
                     topics: list[tuple[str, list[int] | None]] | None) -> list[Key]:  # fmt: skip
    """The partitions a reset touches: those of ``topics`` ((topic, partitions or None for
    all)), or with ``topics`` None every partition the group committed."""
    if topics is None:
        if not committed:
            raise InvalidInputError(f"group {group!r} has no committed offsets; name --topic")
        return sorted(committed)
    md = session.metadata()
    result: set[Key] = set()
    for topic, parts in topics:
        topic_md = md.topics.get(topic)
        if topic_md is None or topic_md.error is not None:
            raise NotFoundError(f"topic {topic!r} does not exist")
        for p in parts if parts is not None else topic_md.partitions:
            if p not in topic_md.partitions:
                raise NotFoundError(f"topic {topic!r} has no partition {p}")
            result.add((topic, p))
    return sorted(result)


def reset_plan(session: Session, group: str, committed: dict[Key, int], keys: list[Key],
               to: ResetTo) -> dict[Key, int]:  # fmt: skip
    """(topic, partition) -> new offset, clamped to [earliest, latest] like Kafka's tool."""
    earliest = log_starts(session, keys)
    latest = end_offsets(session, keys)
    at = at_time(session, keys, to.value) if to.kind == "datetime" else {}
    targets: dict[Key, int] = {}
    for key in keys:
        if to.kind == "earliest":
            target = earliest[key]
        elif to.kind == "latest":
            target = latest[key]
        elif to.kind == "offset":
            target = to.value
        elif to.kind == "shift":
            if key not in committed:
                raise InvalidInputError(
                    f"--shift-by: group {group!r} has no committed offset for {key[0]}-{key[1]}"
                )
            target = committed[key] + to.value
        else:
            target = at[key] if at[key] >= 0 else latest[key]
        targets[key] = max(earliest[key], min(target, latest[key]))
    return targets


def apply_offsets(session: Session, group: str, targets: dict[Key, int]) -> None:
    """Commit ``targets`` as the group's offsets (AlterConsumerGroupOffsets)."""
    request = ConsumerGroupTopicPartitions(
        group, [TopicPartition(t, p, off) for (t, p), off in sorted(targets.items())]
    )
    futures = session.admin.alter_consumer_group_offsets([request],
                                                         request_timeout=session.timeout)
    result = session.wait(futures[group], f"cannot reset offsets of group {group!r}")
    failed = [tp for tp in result.topic_partitions if tp.error is not None]
    if failed:
        tp = failed[0]
        raise RefusedError(f"cannot reset offset of {tp.topic}-{tp.partition}: {tp.error}")
