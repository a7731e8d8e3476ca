"""Fetching from the closest replica (KIP-392): which replica a consumer should read from.

A consumer that names its rack (``client.rack``, Fetch v11+ ``rack_id``) may be sent to a
follower in the same rack. The leader decides, per partition, through the broker's
``replica.selector.class`` (Kafka's names):

* unset or ``org.apache.kafka.common.replica.LeaderSelector``: always the leader (the default);
* ``org.apache.kafka.common.replica.RackAwareReplicaSelector``: a replica in the client's rack,
  the leader if it is one of them, else the one with the highest log end offset, the most
  recently caught up on a tie; the leader when no replica shares the rack.

Only replicas that can serve the fetch offset are candidates (their log end offset is at or
past it) and only live ones (in the metadata cache). When the choice is not the leader, the
leader answers the partition with no records and ``preferred_read_replica`` set; the client
fetches from that broker next, which serves up to its own high watermark (learned from the
leader), and falls back to the leader on any error. Followers never redirect.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from strom.replication.metadata_cache import MetadataCache
    from strom.replication.partition import Partition

LEADER_SELECTOR = "org.apache.kafka.common.replica.LeaderSelector"
RACK_AWARE_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
SELECTORS = (LEADER_SELECTOR, RACK_AWARE_SELECTOR)
NO_PREFERENCE = -1


def check_selector(name: str | None) -> str | None:
    """The selector's full class name (short names accepted); ValueError for an unknown one."""
    if not name:
        return None
    for full in SELECTORS:
        if name in (full, full.rsplit(".", 1)[1]):
            return full
    raise ValueError(f"replica.selector.class={name}: strom knows {', '.join(SELECTORS)}")


def preferred_read_replica(selector: str | None, part: Partition, cache: MetadataCache,
                           client_rack: str, fetch_offset: int) -> int:  # fmt: skip
    """The replica a consumer in ``client_rack`` should fetch ``part`` from, as its leader
    sees it: :data:`NO_PREFERENCE` (-1) means "from me, the leader"."""
    if selector != RACK_AWARE_SELECTOR or not client_rack:
        return NO_PREFERENCE
    leader = cache.broker(part.local_id)
    if leader is not None and leader.rack == client_rack:
        return NO_PREFERENCE
    best: tuple[int, int, int] | None = None  # (log end offset, last caught up, replica)
    for replica, state in part.followers.items():
        info = cache.broker(replica)
        if info is None or info.rack != client_rack or state.log_end_offset < fetch_offset:
            continue
        rank = (state.log_end_offset, state.last_caught_up_ms, replica)
        if best is None or rank[:2] > best[:2]:
            best = rank
    return NO_PREFERENCE if best is None else best[2]
