"""Leader epochs as a single node reports and checks them (GUIDE pitfall 8).

The single node is the leader of every partition in epoch :data:`LEADER_EPOCH` (0, the first
epoch) for ever: the log stamps it on every batch it accepts and keeps it in its leader-epoch
cache (:mod:`strom.storage.leader_epoch`); Metadata, ListOffsets and OffsetForLeaderEpoch
report it. Since clients then validate epochs, requests carrying a ``current_leader_epoch``
(Fetch v9+, ListOffsets v4+, OffsetForLeaderEpoch v2+) are checked as Kafka's
``Partition.checkCurrentLeaderEpoch`` does. Replication replaces the constant by a
per-partition epoch bumped at each leader change.
"""

from __future__ import annotations

from strom.protocol.errors import ErrorCode

LEADER_EPOCH = 0
NO_EPOCH = -1


def check_current_leader_epoch(requested: int, current: int = LEADER_EPOCH) -> ErrorCode:
    """NONE for -1 (the client does not know) or the current epoch; FENCED_LEADER_EPOCH when
    the client's epoch is older (its metadata is stale); UNKNOWN_LEADER_EPOCH when newer (this
    broker's is)."""
    if requested in (NO_EPOCH, current):
        return ErrorCode.none
    return ErrorCode.fenced_leader_epoch if requested < current else ErrorCode.unknown_leader_epoch
