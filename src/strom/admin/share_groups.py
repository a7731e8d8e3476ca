"""Share groups (KIP-932): listings, descriptions, start offsets and lag, resets, deletion.

What ``kafka-share-groups.sh`` does, over :mod:`strom.admin.wire` (confluent-kafka has no
share-group admin calls): ListGroups v5 with the ``share`` type to every broker,
ShareGroupDescribe, DescribeShareGroupOffsets, AlterShareGroupOffsets and
DeleteShareGroupOffsets to the group's coordinator (FindCoordinator, key type group), routed and
retried by :mod:`strom.admin.routing`; DeleteGroups through confluent-kafka (it is the same
request for every group type).

A share group's offsets are its share-partitions' start offsets (SPSO: everything below is
done); the lag is what is left to deliver and acknowledge up to the high watermark. They are
moved only while the group has no members, as Kafka's tool refuses otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from strom.admin import routing
from strom.admin.errors import InvalidInputError, NotFoundError, RefusedError
from strom.admin.offsets import Key, at_time, end_offsets, log_starts
from strom.admin.session import Session
from strom.admin.wire import error_name, part, request
from strom.protocol.errors import ErrorCode

LIST_GROUPS, DESCRIBE, DESCRIBE_OFFSETS, ALTER_OFFSETS, DELETE_OFFSETS = 16, 77, 90, 91, 92
GROUP_KEY = 0
STATES = ("Empty", "Stable", "Dead")


@dataclass(frozen=True)
class ShareGroupListing:
    group: str
    state: str


@dataclass(frozen=True)
class ShareMember:
    member_id: str
    client_id: str
    host: str
    member_epoch: int
    subscribed: list[str]
    assignment: list[Key]


@dataclass(frozen=True)
class ShareGroupDescription:
    group: str
    state: str
    coordinator: str | None  # host:port (id)
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: list[ShareMember]


@dataclass(frozen=True)
class ShareOffsetRow:
    """One share-partition: its start offset and lag (None: not known,
    kafka-share-groups.sh's ``-``)."""

    group: str
    topic: str
    partition: int
    start_offset: int | None
    lag: int | None


class _Client:
    def __init__(self, session: Session) -> None:
        self.session = session

    def candidates(self) -> list[str]:
        live = list(routing.addresses(self.session.metadata()).values())
        boot = [b.strip() for b in self.session.bootstrap.split(",") if b.strip()]
        return live + [b for b in boot if b not in live]

    def to_coordinator(self, group: str, api_key: int, version: int, what: str,
                       answer: Any, **fields: Any) -> Any:  # fmt: skip
        """The coordinator's response to one request about ``group`` (``answer(resp)``: its
        error code for this group, so retriable ones are asked again)."""
        candidates = self.candidates()

        def lookup(ids: list[str]) -> routing.Lookup[str]:
            return routing.coordinators(candidates, GROUP_KEY, ids, self.session.timeout)

        def send(where: str, ids: list[str]) -> routing.Answers[str]:
            resp = request(where, api_key, version, wait_s=self.session.timeout, **fields)
            return {ids[0]: (int(answer(resp)), (where, resp))}

        done, failed = routing.route([group], lookup, send, routing.COORDINATOR_RETRIABLE,
                                     self.session.timeout)  # fmt: skip
        routing.first_failure(failed, lambda g: f"cannot {what} share group {g!r}",
                              self.session.timeout)  # fmt: skip
        return done[group][1]


def list_share_groups(session: Session, state: str | None = None) -> list[ShareGroupListing]:
    """Every share group of the cluster (only those in ``state`` if given), by id."""
    if state is not None and state.lower() not in (s.lower() for s in STATES):
        raise InvalidInputError(f"unknown share group state {state!r}: one of {', '.join(STATES)}")
    brokers = routing.addresses(session.metadata())

    def lookup(ids: list[int]) -> routing.Lookup[int]:
        return {brokers[i]: [i] for i in ids if i in brokers}, {}

    def send(where: str, ids: list[int]) -> routing.Answers[int]:
        resp = request(where, LIST_GROUPS, 5, wait_s=session.timeout,
                       states_filter=(state,) if state else (), types_filter=("share",))  # fmt: skip
        return {ids[0]: (int(resp.error_code), resp.groups)}

    done, failed = routing.route(sorted(brokers), lookup, send,
                                 {ErrorCode.coordinator_load_in_progress}, session.timeout)  # fmt: skip
    routing.first_failure(failed, lambda i: f"cannot list the groups of broker {i}", session.timeout)
    listings = {}
    for broker_id, (code, groups) in done.items():
        if code:
            raise RefusedError(f"cannot list the groups of broker {broker_id}: {error_name(code)}")
        for g in groups:
            listings[str(g.group_id)] = ShareGroupListing(str(g.group_id), str(g.group_state))
    return [listings[g] for g in sorted(listings)]


def describe_share_group(session: Session, group: str) -> ShareGroupDescription:
    """The group's state, epochs and members (NotFoundError when it is no share group)."""
    where, resp = _Client(session).to_coordinator(
        group, DESCRIBE, 1, "describe", lambda r: r.groups[0].error_code,
        group_ids=(group,), include_authorized_operations=False)  # fmt: skip
    (g,) = resp.groups
    code = ErrorCode(int(g.error_code))
    if code == ErrorCode.group_id_not_found:
        raise NotFoundError(f"share group {group!r} does not exist")
    if code != ErrorCode.none:
        raise RefusedError(f"cannot describe share group {group!r}: {error_name(code)}")
    coordinator = _coordinator_text(session, where)
    members = [
        ShareMember(
            member_id=str(m.member_id), client_id=str(m.client_id), host=str(m.client_host),
            member_epoch=int(m.member_epoch), subscribed=sorted(str(t) for t in m.subscribed_topic_names),
            assignment=sorted((str(t.topic_name), int(p)) for t in m.assignment.topic_partitions
                              for p in t.partitions),
        )
        for m in g.members
    ]  # fmt: skip
    return ShareGroupDescription(group, str(g.group_state), coordinator, int(g.group_epoch),
                                 int(g.assignment_epoch), str(g.assignor_name), members)  # fmt: skip


def _coordinator_text(session: Session, where: str) -> str:
    for broker_id, address in routing.addresses(session.metadata()).items():
        if address == where:
            return f"{where} ({broker_id})"
    return where


def offsets(session: Session, group: str) -> list[ShareOffsetRow]:
    """Each share-partition of the group with initialized state: start offset and lag."""
    mod_group = part(DESCRIBE_OFFSETS, 1, "DescribeShareGroupOffsetsRequestGroup", group_id=group,
                     topics=None)  # fmt: skip
    _where, resp = _Client(session).to_coordinator(
        group, DESCRIBE_OFFSETS, 1, "describe the offsets of", lambda r: r.groups[0].error_code,
        groups=(mod_group,))  # fmt: skip
    (g,) = resp.groups
    code = ErrorCode(int(g.error_code))
    if code == ErrorCode.group_id_not_found:
        raise NotFoundError(f"share group {group!r} does not exist")
    if code != ErrorCode.none:
        raise RefusedError(f"cannot describe the offsets of share group {group!r}: {error_name(code)}")
    rows = []
    for t in g.topics:
        for p in t.partitions:
            ok = int(p.error_code) == 0
            start, lag = int(p.start_offset), int(p.lag)
            rows.append(ShareOffsetRow(group, str(t.topic_name), int(p.partition_index),
                                       start if ok and start >= 0 else None,
                                       lag if ok and lag >= 0 else None))  # fmt: skip
    return sorted(rows, key=lambda r: (r.topic, r.partition))


def check_inactive(desc: ShareGroupDescription) -> None:
    if desc.members:
        raise RefusedError(f"cannot reset offsets of share group {desc.group!r}: it has "
                           f"{len(desc.members)} member(s); stop its consumers first")  # fmt: skip


ResetKind = Literal["earliest", "latest", "offset", "datetime"]


def reset_plan(session: Session, keys: list[Key], kind: ResetKind, value: int = 0) -> dict[Key, int]:
    """(topic, partition) -> new start offset, clamped to the log like Kafka's tool."""
    earliest = log_starts(session, keys)
    latest = end_offsets(session, keys)
    at = at_time(session, keys, value) if kind == "datetime" else {}
    targets = {}
    for key in keys:
        if kind == "earliest":
            target = earliest[key]
        elif kind == "latest":
            target = latest[key]
        elif kind == "offset":
            target = value
        else:
            target = at[key] if at[key] >= 0 else latest[key]
        targets[key] = max(earliest[key], min(target, latest[key]))
    return targets


def topic_keys(session: Session, topics: list[str] | None, group: str) -> list[Key]:
    """Every partition of ``topics``, or with None of every topic the group has state for."""
    if topics is None:
        keys = [(r.topic, r.partition) for r in offsets(session, group)]
        if not keys:
            raise InvalidInputError(f"share group {group!r} has no offsets; name --topic")
        return keys
    md = session.metadata()
    out: list[Key] = []
    for name in topics:
        t = md.topics.get(name)
        if t is None or t.error is not None:
            raise NotFoundError(f"topic {name!r} does not exist")
        out += [(name, p) for p in sorted(t.partitions)]
    return out


def apply_offsets(session: Session, group: str, targets: dict[Key, int]) -> None:
    """AlterShareGroupOffsets: the new start offsets (the group must have no members)."""
    by_topic: dict[str, list[tuple[int, int]]] = {}
    for (topic, p), offset in sorted(targets.items()):
        by_topic.setdefault(topic, []).append((p, offset))
    topics = tuple(
        part(ALTER_OFFSETS, 0, "AlterShareGroupOffsetsRequestTopic", topic_name=topic,
             partitions=tuple(part(ALTER_OFFSETS, 0, "AlterShareGroupOffsetsRequestPartition",
                                   partition_index=p, start_offset=o) for p, o in parts))
        for topic, parts in by_topic.items()
    )  # fmt: skip
    _where, resp = _Client(session).to_coordinator(
        group, ALTER_OFFSETS, 0, "reset the offsets of", lambda r: r.error_code,
        group_id=group, topics=topics)  # fmt: skip
    if int(resp.error_code):
        raise RefusedError(f"cannot reset the offsets of share group {group!r}: "
                           f"{error_name(resp.error_code)}{_message(resp)}")  # fmt: skip
    for t in resp.responses:
        for p in t.partitions:
            if int(p.error_code):
                raise RefusedError(f"cannot reset the offset of {t.topic_name}-{p.partition_index}: "
                                   f"{error_name(p.error_code)}{_message(p)}")  # fmt: skip


def delete_offsets(session: Session, group: str, topics: list[str]) -> None:
    """DeleteShareGroupOffsets: forget the group's state for ``topics``."""
    _where, resp = _Client(session).to_coordinator(
        group, DELETE_OFFSETS, 0, "delete the offsets of", lambda r: r.error_code, group_id=group,
        topics=tuple(part(DELETE_OFFSETS, 0, "DeleteShareGroupOffsetsRequestTopic", topic_name=t)
                     for t in topics))  # fmt: skip
    if int(resp.error_code):
        raise RefusedError(f"cannot delete the offsets of share group {group!r}: "
                           f"{error_name(resp.error_code)}{_message(resp)}")  # fmt: skip
    for t in resp.responses:
        if int(t.error_code):
            raise RefusedError(f"cannot delete the offsets of {t.topic_name}: "
                               f"{error_name(t.error_code)}{_message(t)}")  # fmt: skip


def delete_share_groups(session: Session, groups: list[str]) -> None:
    """DeleteGroups (refused for groups with members)."""
    futures = session.admin.delete_consumer_groups(groups, request_timeout=session.timeout)
    for group in groups:
        session.wait(futures[group], f"cannot delete share group {group!r}")


def _message(entity: Any) -> str:
    message = getattr(entity, "error_message", None)
    return f" ({message})" if message else ""
