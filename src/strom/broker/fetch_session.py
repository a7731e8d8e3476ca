"""Incremental fetch sessions (KIP-227): a fetcher of many partitions sends only what changed.

The request's ``session_id`` / ``session_epoch`` (Fetch v7+) say what it wants:

=============  =========  =====================================================================
session_id     epoch      meaning
=============  =========  =====================================================================
0              -1         a full fetch without a session (as before KIP-227)
0 or an id     0          a full fetch that opens a new session (closing the id given); the
                          response carries the new id (0 when the cache has no free slot)
an id          -1         close the session; this request is a full fetch without a session
an id          n > 0      an incremental fetch: the request lists only partitions added or
                          changed (fetch offset, max bytes …) and ``forgotten_topics_data``
                          those to drop; the session remembers the rest; the response holds
                          only partitions with news (records, an error, or a high watermark,
                          last stable offset or log start offset different from the last one
                          sent). Unknown id: FETCH_SESSION_ID_NOT_FOUND; epoch other than the
                          session's next: INVALID_FETCH_SESSION_EPOCH.
=============  =========  =====================================================================

The epoch after n is n + 1 (wrapping to 1 after 2^31 - 1). Sessions live in a
:class:`FetchSessionCache` of ``max.incremental.fetch.session.cache.slots`` entries; when it
is full the least recently used session idle for over :data:`EVICTABLE_AFTER_MS` makes
room, else no session is created (the client keeps fetching in full, which is always valid).
Partitions are keyed by topic name (v7-12) or topic id (v13+), as the request names them.
"""

from __future__ import annotations

import collections
import random
import uuid
from dataclasses import dataclass, field
from typing import Any

from strom.protocol.errors import ErrorCode

EVICTABLE_AFTER_MS = 120_000
FINAL_EPOCH, INITIAL_EPOCH = -1, 0
_NULL_ID = uuid.UUID(int=0)


@dataclass(slots=True)
class SessionPartition:
    """What the session remembers of a partition: the fetch parameters last requested, and
    what the last response including it said (to send it again only when it changes)."""

    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = -1
    hw: int = -2
    lso: int = -2
    log_start: int = -2


@dataclass(slots=True)
class SessionTopic:
    """A topic of a request as the Fetch plan reads it (``topic`` or ``topic_id``)."""

    topic: str
    topic_id: uuid.UUID
    partitions: list[SessionPartition]


@dataclass(slots=True)
class FetchSession:
    id: int
    epoch: int  # the epoch the next request must carry
    last_used_ms: int
    partitions: dict[tuple[Any, int], SessionPartition] = field(default_factory=dict)

    def topics(self) -> list[SessionTopic]:
        """The session's partitions grouped by topic, in the order they were added."""
        out: dict[Any, SessionTopic] = {}
        for (key, _p), part in self.partitions.items():
            topic = out.get(key)
            if topic is None:
                name, topic_id = (key, _NULL_ID) if isinstance(key, str) else ("", key)
                topic = out[key] = SessionTopic(name, topic_id, [])
            topic.partitions.append(part)
        return list(out.values())


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= 2**31 - 1 else epoch + 1


def _topic_key(topic: Any, by_id: bool) -> Any:
    return topic.topic_id if by_id else str(topic.topic)


def _parts(topic: Any) -> list[SessionPartition]:
    return [SessionPartition(int(p.partition), int(p.fetch_offset), int(p.partition_max_bytes),
                             int(getattr(p, "current_leader_epoch", -1)))
            for p in topic.partitions]  # fmt: skip


class FetchSessionCache:
    def __init__(self, slots: int) -> None:
        self.slots = slots
        self._sessions: collections.OrderedDict[int, FetchSession] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    def remove(self, session_id: int) -> None:
        self._sessions.pop(session_id, None)

    def create(self, now_ms: int) -> FetchSession | None:
        if self.slots <= 0:
            return None
        if len(self._sessions) >= self.slots:
            oldest_id, oldest = next(iter(self._sessions.items()))
            if now_ms - oldest.last_used_ms < EVICTABLE_AFTER_MS:
                return None
            del self._sessions[oldest_id]
        session_id = random.randint(1, 2**31 - 1)
        while session_id in self._sessions:
            session_id = random.randint(1, 2**31 - 1)
        session = self._sessions[session_id] = FetchSession(session_id, 1, now_ms)
        return session

    def touch(self, session: FetchSession, now_ms: int) -> None:
        session.last_used_ms = now_ms
        self._sessions.move_to_end(session.id)


class SessionContext:
    """One request's view: the topics to read and, after the read, which partitions to send."""

    def __init__(self, topics: list[Any], session: FetchSession | None,
                 incremental: bool, by_id: bool) -> None:  # fmt: skip
        self.topics = topics
        self.session = session
        self.incremental = incremental
        self.by_id = by_id

    @property
    def session_id(self) -> int:
        return self.session.id if self.session is not None else 0

    def filter(self, responses: list[Any]) -> list[Any]:
        """Remember what is sent; on an incremental fetch keep only partitions with news."""
        session = self.session
        if session is None:
            return responses
        out = []
        for topic in responses:
            key = topic.topic_id if self.by_id else topic.topic
            kept = []
            for p in topic.partitions:
                cached = session.partitions.get((key, p.partition_index))
                if cached is None:
                    kept.append(p)
                    continue
                changed = (p.records or p.error_code != 0 or p.preferred_read_replica >= 0
                           or cached.hw != p.high_watermark
                           or cached.lso != p.last_stable_offset
                           or cached.log_start != p.log_start_offset)  # fmt: skip
                cached.hw, cached.lso = p.high_watermark, p.last_stable_offset
                cached.log_start = p.log_start_offset
                if changed or not self.incremental:
                    kept.append(p)
            if kept or not self.incremental:
                out.append(topic._replace(partitions=kept))
        return out


def open_context(cache: FetchSessionCache, request: Any, version: int,
                 now_ms: int) -> SessionContext | ErrorCode:  # fmt: skip
    """The session context of a Fetch request (an error code for a bad session)."""
    by_id = version >= 13
    session_id = int(getattr(request, "session_id", 0)) if version >= 7 else 0
    epoch = int(getattr(request, "session_epoch", FINAL_EPOCH)) if version >= 7 else FINAL_EPOCH
    requested = list(request.topics)  # a full fetch reads the request's own entities
    if epoch == FINAL_EPOCH:
        if session_id:
            cache.remove(session_id)
        return SessionContext(requested, None, False, by_id)
    if epoch == INITIAL_EPOCH:
        if session_id:
            cache.remove(session_id)
        session = cache.create(now_ms)
        if session is not None:
            for topic in request.topics:
                key = _topic_key(topic, by_id)
                for part in _parts(topic):
                    session.partitions[(key, part.partition)] = part
        return SessionContext(requested, session, False, by_id)
    session = cache.get(session_id)
    if session is None:
        return ErrorCode.fetch_session_id_not_found
    if epoch != session.epoch:
        return ErrorCode.invalid_fetch_session_epoch
    for topic in request.topics:
        key = _topic_key(topic, by_id)
        for part in _parts(topic):
            cached = session.partitions.get((key, part.partition))
            if cached is None:
                session.partitions[(key, part.partition)] = part
            else:
                cached.fetch_offset = part.fetch_offset
                cached.partition_max_bytes = part.partition_max_bytes
                cached.current_leader_epoch = part.current_leader_epoch
    for forgotten in getattr(request, "forgotten_topics_data", ()) or ():
        key = _topic_key(forgotten, by_id)
        for index in forgotten.partitions:
            session.partitions.pop((key, int(index)), None)
    session.epoch = next_epoch(epoch)
    cache.touch(session, now_ms)
    return SessionContext(session.topics(), session, True, by_id)
