"""What the console reads from and changes in the cluster: the admin layer, as page data.

The console is one more client of :mod:`strom.admin` (the CLI is the other): one
:class:`~strom.admin.session.Session` serves every request (librdkafka clients are
thread-safe; Starlette runs the page handlers in its thread pool), and its results become the
dicts the templates read. Every failure is an :class:`~strom.admin.errors.AdminError` with
one readable sentence, which the web layer shows on the page. The producer (the message
browser's "produce") is made on first use.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import asdict
from typing import Any

from confluent_kafka import Producer

from strom.admin import cluster as admin_cluster
from strom.admin import groups, log_dirs, offsets, share_groups, topics
from strom.admin.client_security import WireSecurity, to_librdkafka
from strom.admin.errors import InvalidInputError
from strom.admin.groups import ResetTo
from strom.admin.offsets import Key
from strom.admin.session import DEFAULT_TIMEOUT_S, ClientSettings, Session, parse_properties
from strom.admin.timestamps import parse_datetime_ms
from strom.admin.wire import use_security

log = logging.getLogger(__name__)

CLIENT_ID = "strom-console"
#: Reset strategies offered by the console (the names of ``strom group reset-offsets``).
RESET_STRATEGIES = ("earliest", "latest", "offset", "datetime")


class Cluster:
    """The cluster seen through one bootstrap address (``checked``: the address was checked
    before, by :func:`strom.console.server.serve`, so no preflight here)."""

    def __init__(self, bootstrap: str, client_config: list[str] | None = None,
                 timeout: float = DEFAULT_TIMEOUT_S, checked: bool = True) -> None:  # fmt: skip
        self.bootstrap = bootstrap
        # -X client settings, Java security names carried over; strom's own wire requests
        # (transactions, share groups, KIP-848 groups) go out secured the same way
        properties = {"client.id": CLIENT_ID,
                      **to_librdkafka(parse_properties(list(client_config or [])))}
        use_security(WireSecurity.from_properties(properties))
        self.session = Session(ClientSettings(bootstrap, timeout=timeout, client_id=CLIENT_ID,
                                              properties=properties, checked=checked))
        self._lock = threading.Lock()
        self._producer: Producer | None = None

    @property
    def timeout(self) -> float:
        return self.session.timeout

    def producer(self) -> Producer:
        with self._lock:
            if self._producer is None:
                self._producer = self.session.producer({"linger.ms": 0, "acks": "all"})
            return self._producer

    def close(self) -> None:
        with self._lock:
            if self._producer is not None:
                self._producer.flush(self.timeout)
            self._producer = None
        self.session.close()

    # -- cluster ---------------------------------------------------------------------------

    def metadata(self) -> Any:
        return self.session.metadata()

    def overview(self) -> dict[str, Any]:
        """Brokers (controller, rack, address), topic and partition health, groups by state."""
        md = self.metadata()
        desc = admin_cluster.describe_cluster(self.session)
        brokers = [{**asdict(b), "controller": b.id == desc.controller} for b in desc.brokers]
        offline, under = [], []
        partitions = 0
        for name, t in sorted(md.topics.items()):
            for pid, part in sorted(t.partitions.items()):
                partitions += 1
                if part.leader < 0:
                    offline.append(f"{name}-{pid}")
                elif len(part.isrs) < len(part.replicas):
                    under.append(f"{name}-{pid}")
        states: dict[str, int] = {}
        for g in groups.list_groups(self.session):
            states[g.state] = states.get(g.state, 0) + 1
        return {
            "cluster_id": desc.cluster_id,
            "controller": desc.controller,
            "brokers": brokers,
            "topics": sum(1 for n in md.topics if not topics.is_internal(n)),
            "internal_topics": sum(1 for n in md.topics if topics.is_internal(n)),
            "partitions": partitions,
            "offline": offline,
            "under_replicated": under,
            "group_states": dict(sorted(states.items())),
        }

    # -- topics ----------------------------------------------------------------------------

    def topic_names(self, internal: bool = True) -> list[str]:
        return sorted(n for n in self.metadata().topics if internal or not topics.is_internal(n))

    def partition_keys(self, names: list[str] | None = None) -> list[Key]:
        md_topics = self.metadata().topics
        return sorted((n, p) for n, t in md_topics.items() if t.error is None
                      and (names is None or n in names) for p in t.partitions)

    def end_offsets(self, keys: list[Key], earliest: bool = False) -> dict[Key, int]:
        if earliest:
            return offsets.log_starts(self.session, keys)
        return offsets.end_offsets(self.session, keys)

    def led(self, keys: list[Key]) -> list[Key]:
        """The partitions of ``keys`` that have a leader now (metadata)."""
        md_topics = self.metadata().topics
        out = []
        for name, index in keys:
            t = md_topics.get(name)
            part = t.partitions.get(index) if t is not None and t.error is None else None
            if part is not None and part.leader >= 0:
                out.append((name, index))
        return out

    def partition_sizes(self, keys: list[Key]) -> dict[Key, int]:
        """Bytes of each partition's log on its leader (DescribeLogDirs to each leading
        broker). A partition without a leader, or whose leader cannot be asked now, is left
        out: its size shows as unknown, and the page still renders (one broker down must not
        take the topic pages with it)."""
        return log_dirs.leader_partition_sizes(self.metadata(), keys, self.timeout)

    def topics(self) -> list[dict[str, Any]]:
        """One row per topic: partitions, replicas, size (DescribeLogDirs), messages."""
        md = self.metadata()
        keys = self.led(self.partition_keys())  # an offline partition has no offsets to list
        start = self.end_offsets(keys, earliest=True)
        end = self.end_offsets(keys)
        sizes = self.partition_sizes(keys)
        rows = []
        for name, t in sorted(md.topics.items()):
            parts = sorted(t.partitions)
            rows.append({
                "name": name,
                "internal": topics.is_internal(name),
                "partitions": len(parts),
                "replicas": len(t.partitions[parts[0]].replicas) if parts else 0,
                "size": sum(max(sizes.get((name, p), 0), 0) for p in parts),
                "messages": sum(end[(name, p)] - start[(name, p)] for p in parts
                                if (name, p) in end),
                "error": str(t.error) if t.error is not None else None,
            })
        return rows

    def topic(self, name: str) -> dict[str, Any]:
        """Partitions (leader, replicas, ISR, offsets, size) and configs of one topic."""
        [desc] = topics.describe_topics(self.session, [name])
        doc = asdict(desc)
        keys = [(name, p.partition) for p in desc.partitions]
        online = self.led(keys)  # offline partitions: offsets and size unknown ("-")
        start = self.end_offsets(online, earliest=True)
        end = self.end_offsets(online)
        sizes = self.partition_sizes(online)
        doc["partition_rows"] = [
            {"topic": name, "partition": p.partition, "leader": p.leader,
             "replicas": p.replicas, "isr": p.isr,
             "log_start_offset": start.get(k), "log_end_offset": end.get(k),
             "messages": end[k] - start[k] if k in end else None, "size": sizes.get(k, -1)}
            for p, k in zip(desc.partitions, keys, strict=True)
        ]
        doc["configs"] = [asdict(c) for c in topics.topic_configs(self.session, name)]
        doc["size"] = sum(max(r["size"], 0) for r in doc["partition_rows"])
        doc["messages"] = sum(r["messages"] or 0 for r in doc["partition_rows"])
        return doc

    def create_topic(self, name: str, partitions: int, replication: int,
                     configs: dict[str, str]) -> None:
        topics.create_topic(self.session, name, partitions, replication, configs,
                            partitions_flag="partitions")  # fmt: skip

    def delete_topic(self, name: str) -> None:
        topics.delete_topics(self.session, [name])

    def alter_topic_config(self, name: str, key: str, value: str | None) -> None:
        """Set ``key`` (or with ``value`` None, remove the override: back to the default)."""
        if not key.strip():
            raise InvalidInputError("config name must not be empty")
        sets = {key.strip(): value} if value is not None else {}
        deletes = [key.strip()] if value is None else []
        topics.alter_topic_configs(self.session, name, sets, deletes,
                                   what=f"cannot alter config {key!r} of {name!r}")

    # -- groups ----------------------------------------------------------------------------

    def group_listings(self) -> list[dict[str, Any]]:
        return [{"group": g.group, "state": g.state} for g in groups.list_groups(self.session)]

    def groups(self) -> list[dict[str, Any]]:
        """Every group with its state, member count and total lag (committed partitions)."""
        return [asdict(g) for g in groups.summaries(self.session)]

    def group(self, name: str) -> dict[str, Any]:
        """State, members with their assignments, and lag per partition."""
        desc = groups.describe_group(self.session, name)
        rows = groups.offset_rows(self.session, desc)
        return {
            "group": name,
            "state": desc.state,
            "type": desc.type,
            "inactive": desc.inactive,
            "protocol": desc.assignor,
            "coordinator": str(desc.coordinator) if desc.coordinator else None,
            "members": [asdict(m) for m in desc.members],
            "partitions": [asdict(r) for r in rows if r.topic is not None],
            "lag": groups.total_lag(rows),
        }

    def share_groups(self) -> list[dict[str, Any]]:
        """Every share group with its state, member count, topics and lag (what is left to
        deliver and acknowledge up to the high watermarks)."""
        rows = []
        for listing in share_groups.list_share_groups(self.session):
            desc = share_groups.describe_share_group(self.session, listing.group)
            offsets_ = share_groups.offsets(self.session, listing.group)
            rows.append({
                "group": listing.group, "state": desc.state, "members": len(desc.members),
                "topics": sorted({r.topic for r in offsets_}),
                "lag": sum(r.lag for r in offsets_ if r.lag is not None),
            })  # fmt: skip
        return rows

    def share_group(self, name: str) -> dict[str, Any]:
        """A share group's state, members with their assignments, start offsets and lag."""
        desc = share_groups.describe_share_group(self.session, name)
        rows = share_groups.offsets(self.session, name)
        return {
            "group": name, "state": desc.state, "coordinator": desc.coordinator,
            "group_epoch": desc.group_epoch, "assignor": desc.assignor,
            "members": [asdict(m) for m in desc.members],
            "partitions": [asdict(r) for r in rows],
            "lag": sum(r.lag for r in rows if r.lag is not None),
        }  # fmt: skip

    def delete_share_group(self, name: str) -> None:
        share_groups.delete_share_groups(self.session, [name])

    def reset_plan(self, name: str, topic: str | None, strategy: str,
                   value: str = "") -> list[dict[str, Any]]:
        """The offsets a reset would commit (``strom group reset-offsets``'s plan, clamped to
        each log), with the current committed offset beside each; changes nothing."""
        if strategy not in RESET_STRATEGIES:
            raise InvalidInputError(f"unknown reset strategy {strategy!r}: one of "
                                    f"{', '.join(RESET_STRATEGIES)}")  # fmt: skip
        to = ResetTo("earliest") if strategy == "earliest" else ResetTo("latest")
        if strategy == "offset":
            try:
                to = ResetTo("offset", int(value))
            except ValueError:
                raise InvalidInputError(f"invalid offset {value!r}: expected an integer") from None
        if strategy == "datetime":
            if not value.strip():
                raise InvalidInputError("give a date and time to reset to")
            to = ResetTo("datetime", parse_datetime_ms(value.strip()))
        groups.check_inactive(groups.describe_group(self.session, name, must_exist=False))
        committed = groups.committed_offsets(self.session, name)
        keys = groups.reset_partitions(self.session, name, committed,
                                       [(topic, None)] if topic else None)  # fmt: skip
        targets = groups.reset_plan(self.session, name, committed, keys, to)
        return [{"topic": t, "partition": p, "current_offset": committed.get((t, p)),
                 "new_offset": off} for (t, p), off in sorted(targets.items())]

    def apply_reset(self, name: str, targets: dict[Key, int]) -> None:
        """Commit the offsets a dry run showed (refused while the group has members)."""
        if not targets:
            raise InvalidInputError("nothing to reset: the plan is empty")
        groups.check_inactive(groups.describe_group(self.session, name, must_exist=False))
        groups.apply_offsets(self.session, name, targets)

    def delete_group(self, name: str) -> None:
        groups.delete_groups(self.session, [name])
