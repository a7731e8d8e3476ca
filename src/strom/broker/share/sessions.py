"""Share sessions: ShareFetch's sessions, per broker (Kafka's ``ShareSessionCache``).

A member's ShareFetch requests to one broker form a session: the request with share session
epoch 0 opens it with the partitions it names (a session the member had here is closed
first); each later request carries the next epoch (1, 2, …, wrapping to 1) and adds
partitions, or forgets some (``forgotten_topics_data``); epoch -1 (ShareFetch or
ShareAcknowledge) applies its acknowledgements and closes the session. An epoch that is not the
one expected is INVALID_SHARE_SESSION_EPOCH (and the session is closed: the client opens a new
one); a session that does not exist here is SHARE_SESSION_NOT_FOUND; more than
``group.share.max.share.sessions`` sessions is SHARE_SESSION_LIMIT_REACHED.

A session belongs to the connection it was opened on: when that connection closes the session
closes too. Closing a session releases the records its member had acquired through it (its
share-partitions here), which is how a crashed consumer's records go to others before their
locks run out — the caller does that with what :meth:`ShareSessionCache.close` returns.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from strom.protocol.errors import ErrorCode

FINAL_EPOCH = -1
INITIAL_EPOCH = 0
Partition = tuple[uuid.UUID, int]  # (topic id, partition index)
SessionKey = tuple[str, str]  # (group, member id)


@dataclass(slots=True)
class ShareSession:
    group: str
    member: str
    connection_id: int
    epoch: int = 1  # the epoch the next request must carry
    partitions: dict[Partition, None] = field(default_factory=dict)  # insertion-ordered set
    last_used_ms: int = 0


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= 2**31 - 1 else epoch + 1


class ShareSessionCache:
    def __init__(self, max_sessions: int = 2000) -> None:
        self.max_sessions = max_sessions
        self.sessions: dict[SessionKey, ShareSession] = {}

    def open(self, group: str, member: str, connection_id: int, partitions: Iterable[Partition],
             now_ms: int) -> tuple[ErrorCode, ShareSession | None, ShareSession | None]:  # fmt: skip
        """Epoch 0: (error, the new session, the one it replaced — the caller releases its
        records)."""
        old = self.sessions.pop((group, member), None)
        if len(self.sessions) >= self.max_sessions:
            if old is not None:
                self.sessions[(group, member)] = old
            return ErrorCode.share_session_limit_reached, None, None
        session = ShareSession(group, member, connection_id, last_used_ms=now_ms)
        session.partitions.update(dict.fromkeys(partitions))
        self.sessions[(group, member)] = session
        return ErrorCode.none, session, old

    def use(self, group: str, member: str, epoch: int, now_ms: int
            ) -> tuple[ErrorCode, ShareSession | None]:  # fmt: skip
        """A request at ``epoch`` (> 0, or -1): the session, with its expected epoch moved on.
        A wrong epoch closes the session: (INVALID_SHARE_SESSION_EPOCH, the closed session)."""
        session = self.sessions.get((group, member))
        if session is None:
            return ErrorCode.share_session_not_found, None
        if epoch != FINAL_EPOCH and epoch != session.epoch:
            del self.sessions[(group, member)]
            return ErrorCode.invalid_share_session_epoch, session
        if epoch != FINAL_EPOCH:
            session.epoch = next_epoch(session.epoch)
        session.last_used_ms = now_ms
        return ErrorCode.none, session

    def close(self, group: str, member: str) -> ShareSession | None:
        return self.sessions.pop((group, member), None)

    def close_connection(self, connection_id: int) -> list[ShareSession]:
        """The sessions of a connection that closed (removed)."""
        gone = [k for k, s in self.sessions.items() if s.connection_id == connection_id]
        return [self.sessions.pop(k) for k in gone]

    def idle(self, older_than_ms: int) -> list[ShareSession]:
        """Sessions unused since ``older_than_ms`` (removed)."""
        gone = [k for k, s in self.sessions.items() if s.last_used_ms < older_than_ms]
        return [self.sessions.pop(k) for k in gone]

    def uses(self, group: str, partition: Partition) -> bool:
        return any(s.group == group and partition in s.partitions for s in self.sessions.values())
